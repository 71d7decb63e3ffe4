// config.json: the defaults and derived values of reference/mixserve_ref/config.py, and one
// message naming the key for each rule it enforces.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/model_config.h"

namespace mixserve {
namespace {

using json = nlohmann::json;

// A small valid config: d=32, l=64, one layer of each given kind.
json base_config(const std::vector<json>& layers = {{{"mixer", "she"}}}) {
  return {{"vocab_size", 100}, {"d_model", 32},     {"n_layers", layers.size()},
          {"ffn_dim", 64},     {"max_seq_len", 64}, {"layers", layers}};
}

std::string parse_error(const json& j) {
  try {
    parse_model_config(j.dump());
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(parsed without error)";
}

TEST(ModelConfig, EveryMixerNameRoundTrips) {
  ASSERT_EQ(all_mixer_kinds().size(), kMixerKinds);
  std::string names;
  for (MixerKind kind : all_mixer_kinds()) {
    EXPECT_EQ(parse_mixer_kind(mixer_kind_name(kind)), kind) << mixer_kind_name(kind);
    names += (names.empty() ? "" : ", ") + std::string(mixer_kind_name(kind));
  }
  EXPECT_STREQ(mixer_kind_name(MixerKind::kAftLocal), "aft_local");
  EXPECT_EQ(names.rfind("attention, aft_simple, aft_local, aft_full, ", 0), 0u);
  try {
    parse_mixer_kind("mamba");
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_EQ(e.what(), "unknown mixer \"mamba\" (known: " + names + ")");
  }
}

TEST(ModelConfig, ParsesEveryKeyAndMixer) {
  const json j = {{"vocab_size", 5000},
                  {"d_model", 128},
                  {"n_layers", 12},
                  {"ffn_dim", 512},
                  {"max_seq_len", 128},
                  {"position", "sinusoidal"},
                  {"embed_scale", 11.25},
                  {"norm", "rmsnorm"},
                  {"norm_eps", 1e-6},
                  {"activation", "gelu_tanh"},
                  {"ffn", "rwkv_channel_mix"},
                  {"bias", false},
                  {"head_bias", true},
                  {"tie_embeddings", false},
                  {"embed_norm", true},
                  {"bos_id", 1},
                  {"eos_id", 4999},
                  {"layers",
                   {{{"mixer", "attention"}, {"heads", 4}, {"rope", true}, {"rope_base", 500.0}},
                    {{"mixer", "aft_simple"}},
                    {{"mixer", "aft_local"}, {"window", 16}},
                    {{"mixer", "aft_full"}},
                    {{"mixer", "retnet"},
                     {"heads", 8},
                     {"rope_base", 10000},
                     {"gn_eps", 1e-6},
                     {"value_dim", 256},
                     {"rope_style", "torchscale"},
                     {"group_norm", "rmsnorm"},
                     {"decay_normalize", true}},
                    {{"mixer", "she"}, {"window", 32}, {"out_proj", false}},
                    {{"mixer", "he"}, {"window", 1}},
                    {{"mixer", "we"}, {"window", 128}},
                    {{"mixer", "me"}, {"window", 18}},
                    {{"mixer", "rwkv"}},
                    {{"mixer", "linear"},
                     {"heads", 2},
                     {"eps", 1e-3},
                     {"feature_map", "elementwise_product"},
                     {"q_scale", true},
                     {"normalize", false},
                     {"group_norm", "rmsnorm"},
                     {"gn_eps", 1e-2},
                     {"gn_weight", true}},
                    {{"mixer", "performer"}, {"heads", 4}, {"features", 64}, {"eps", 1e-4}}}}};
  const ModelConfig c = parse_model_config(j.dump());
  EXPECT_EQ(c.vocab_size, 5000);
  EXPECT_EQ(c.d_model, 128);
  EXPECT_EQ(c.n_layers, 12);
  EXPECT_EQ(c.ffn_dim, 512);
  EXPECT_EQ(c.max_seq_len, 128);
  EXPECT_EQ(c.position, PositionKind::kSinusoidal);
  EXPECT_EQ(c.embed_scale, 11.25f);
  EXPECT_EQ(c.norm, NormKind::kRmsNorm);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_EQ(c.ffn, FfnKind::kRwkvChannelMix);
  EXPECT_FALSE(c.bias);
  EXPECT_TRUE(c.head_bias);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_TRUE(c.embed_norm);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 4999);
  ASSERT_EQ(c.layers.size(), 12u);
  for (size_t i = 0; i < 12; ++i)
    EXPECT_EQ(mixer_kind_name(c.layers[i].kind), j["layers"][i]["mixer"].get<std::string>());
  EXPECT_EQ(c.layers[0].heads, 4);
  EXPECT_TRUE(c.layers[0].rope);
  EXPECT_EQ(c.layers[0].rope_base, 500.0);
  EXPECT_EQ(c.head_dim(0), 32);
  EXPECT_EQ(c.layers[2].window, 16);
  EXPECT_EQ(c.layers[4].heads, 8);
  EXPECT_EQ(c.layers[4].gn_eps, 1e-6f);
  EXPECT_EQ(c.layers[4].value_dim, 256);
  EXPECT_EQ(c.layers[4].rope_style, RopeStyle::kTorchscale);
  EXPECT_EQ(c.layers[4].group_norm, NormKind::kRmsNorm);
  EXPECT_TRUE(c.layers[4].decay_normalize);
  EXPECT_FALSE(c.layers[5].out_proj);
  EXPECT_EQ(c.layers[5].window, 32);
  EXPECT_EQ(c.layers[6].window, 1);
  EXPECT_EQ(c.layers[7].window, 128);
  EXPECT_EQ(c.layers[10].eps, 1e-3f);
  EXPECT_EQ(c.layers[10].feature_map, FeatureMap::kElementwiseProduct);
  EXPECT_TRUE(c.layers[10].q_scale);
  EXPECT_FALSE(c.layers[10].normalize);
  EXPECT_EQ(c.layers[10].group_norm, NormKind::kRmsNorm);
  EXPECT_EQ(c.layers[10].gn_eps, 1e-2f);
  EXPECT_TRUE(c.layers[10].gn_weight);
  EXPECT_EQ(c.layers[11].features, 64);
  EXPECT_EQ(c.layers[11].eps, 1e-4f);
}

TEST(ModelConfig, DefaultsAndDerivedValuesMatchTheReference) {
  const ModelConfig c = parse_model_config(base_config({{{"mixer", "attention"}},
                                                        {{"mixer", "aft_local"}},
                                                        {{"mixer", "retnet"}, {"heads", 2}},
                                                        {{"mixer", "she"}},
                                                        {{"mixer", "me"}},
                                                        {{"mixer", "linear"}},
                                                        {{"mixer", "performer"}, {"heads", 4}}})
                                               .dump());
  EXPECT_EQ(c.position, PositionKind::kLearned);
  EXPECT_EQ(c.embed_scale, 1.0f);
  EXPECT_EQ(c.norm, NormKind::kLayerNorm);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.activation, Activation::kRelu);
  EXPECT_EQ(c.ffn, FfnKind::kMlp);
  EXPECT_TRUE(c.bias);
  EXPECT_TRUE(c.head_bias) << "head_bias follows bias";
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.embed_norm);
  EXPECT_EQ(c.bos_id, -1);
  EXPECT_EQ(c.eos_id, -1);
  EXPECT_EQ(c.layers[0].heads, 1);
  EXPECT_FALSE(c.layers[0].rope);
  EXPECT_EQ(c.layers[0].rope_base, 10000.0);
  EXPECT_EQ(c.layers[1].window, 32) << "aft_local's own default";
  EXPECT_EQ(c.layers[2].gn_eps, 1e-5f);
  EXPECT_EQ(c.layers[2].value_dim, 32) << "retnet's value_dim defaults to d_model";
  EXPECT_EQ(c.layers[2].rope_style, RopeStyle::kHalf);
  EXPECT_EQ(c.layers[2].group_norm, NormKind::kLayerNorm);
  EXPECT_FALSE(c.layers[2].decay_normalize);
  EXPECT_EQ(c.layers[3].window, 64) << "FIR windows default to max_seq_len";
  EXPECT_TRUE(c.layers[3].out_proj);
  EXPECT_EQ(c.layers[4].window, 64);
  EXPECT_EQ(c.layers[5].eps, 1e-6f);
  EXPECT_EQ(c.layers[5].feature_map, FeatureMap::kElu);
  EXPECT_FALSE(c.layers[5].q_scale);
  EXPECT_TRUE(c.layers[5].normalize);
  EXPECT_EQ(c.layers[5].group_norm, NormKind::kNone)
      << "linear attention has no group norm by default";
  EXPECT_FALSE(c.layers[5].gn_weight);
  EXPECT_FALSE(c.layers[2].gn_weight);
  EXPECT_EQ(c.layers[6].features, 8) << "performer features default to d_model / heads";

  json no_bias = base_config();
  no_bias["bias"] = false;
  EXPECT_FALSE(parse_model_config(no_bias.dump()).head_bias);
}

// config.py takes null as "the default" exactly where its default is None.
TEST(ModelConfig, NullMeansTheDefaultOnlyWhereTheReferenceSaysSo) {
  json j = base_config({{{"mixer", "aft_local"}, {"window", nullptr}},
                        {{"mixer", "performer"}, {"heads", 2}, {"features", nullptr}}});
  j["bias"] = false;
  j["head_bias"] = nullptr;
  const ModelConfig c = parse_model_config(j.dump());
  EXPECT_EQ(c.layers[0].window, 64) << "a null window is max_seq_len, even for aft_local";
  EXPECT_EQ(c.layers[1].features, 16);
  EXPECT_FALSE(c.head_bias);

  json heads = base_config({{{"mixer", "linear"}, {"heads", nullptr}}});
  EXPECT_NE(parse_error(heads).find("layers[0]: heads must be an integer, got null"),
            std::string::npos)
      << parse_error(heads);
  json vocab = base_config();
  vocab["vocab_size"] = nullptr;
  EXPECT_NE(parse_error(vocab).find("vocab_size must be a positive integer, got null"),
            std::string::npos);
}

TEST(ModelConfig, MessageNamesTheFileAndTheKey) {
  json j = base_config({{{"mixer", "rwkv"}}, {{"mixer", "rwkv"}}, {{"mixer", "we"}}});
  j["max_seq_len"] = 128;
  j["layers"][2]["window"] = 0;
  try {
    parse_model_config(j.dump(), "models/x/config.json");
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_STREQ(e.what(),
                 "models/x/config.json: layers[2]: window=0 must be in [1, max_seq_len=128]");
  }
}

// Found by fuzz/fuzz_model_config (fuzz/corpus/model_config/number-overflow.json): a number
// beyond double's range is nlohmann's out_of_range, not parse_error, and escaped as a bare
// json exception instead of a ModelError naming the file.
TEST(ModelConfig, NumberBeyondDoubleIsAModelErrorNamingTheFile) {
  std::string text = base_config({{{"mixer", "retnet"}, {"heads", 4}}}).dump();
  text.insert(text.rfind('}'), R"(,"embed_scale":1e405)");
  try {
    parse_model_config(text, "models/x/config.json");
    FAIL() << "accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("models/x/config.json: not valid JSON"), std::string::npos)
        << e.what();
  }
}

struct BadConfig {
  const char* what;
  std::function<void(json&)> edit;
  std::string message;  // expected part of the error
};

TEST(ModelConfig, EveryRuleHasItsMessage) {
  auto layer = [](json l) { return [l](json& j) { j["layers"][0] = l; }; };
  auto set = [](const char* key, json v) { return [key, v](json& j) { j[key] = v; }; };
  const std::vector<BadConfig> cases = {
      // config.py's rules.
      {"unknown key", set("dropout", 0.1), "config.json: unknown key \"dropout\""},
      {"missing key", [](json& j) { j.erase("ffn_dim"); }, "config.json: missing key \"ffn_dim\""},
      {"zero vocab", set("vocab_size", 0),
       "config.json: vocab_size must be a positive integer, got 0"},
      {"negative d_model", set("d_model", -32), "d_model must be a positive integer, got -32"},
      {"fractional ffn_dim", set("ffn_dim", 64.5), "ffn_dim must be a positive integer, got 64.5"},
      {"integral float", set("max_seq_len", 64.0),
       "max_seq_len must be a positive integer, got 64.0"},
      {"string n_layers", set("n_layers", "1"), "n_layers must be a positive integer, got \"1\""},
      {"n_layers mismatch", set("n_layers", 2), "n_layers is 2 but layers has 1 entries"},
      {"layers not a list", set("layers", json::object()), "layers must be a list"},
      {"position", set("position", "rotary"),
       "position must be one of learned, sinusoidal, none, got \"rotary\""},
      {"norm", set("norm", "rms"), "norm must be one of layernorm, rmsnorm, got \"rms\""},
      {"activation", set("activation", "swish"),
       "activation must be one of relu, gelu_tanh, gelu, silu, got \"swish\""},
      {"ffn", set("ffn", "moe"), "ffn must be one of mlp, rwkv_channel_mix, glu, got \"moe\""},
      {"value_dim not a multiple of heads",
       layer({{"mixer", "retnet"}, {"heads", 4}, {"value_dim", 30}}),
       "layers[0]: value_dim=30 must be a positive multiple of heads=4"},
      {"zero value_dim", layer({{"mixer", "retnet"}, {"value_dim", 0}}),
       "layers[0]: value_dim=0 must be a positive multiple of heads=1"},
      {"rope_style", layer({{"mixer", "retnet"}, {"rope_style", "interleaved"}}),
       "layers[0]: rope_style must be one of half, torchscale, got \"interleaved\""},
      {"group_norm", layer({{"mixer", "retnet"}, {"group_norm", "groupnorm"}}),
       "layers[0]: group_norm must be one of layernorm, rmsnorm, got \"groupnorm\""},
      {"decay_normalize not a bool", layer({{"mixer", "retnet"}, {"decay_normalize", 1}}),
       "layers[0]: decay_normalize must be true or false, got 1"},
      {"feature_map", layer({{"mixer", "linear"}, {"feature_map", "hedgehog"}}),
       "layers[0]: feature_map must be one of elu, relu, identity, elementwise_product, got "
       "\"hedgehog\""},
      {"retnet without a group norm", layer({{"mixer", "retnet"}, {"group_norm", "none"}}),
       "layers[0]: group_norm must be one of layernorm, rmsnorm, got \"none\""},
      {"gn_weight not a bool", layer({{"mixer", "linear"}, {"gn_weight", "yes"}}),
       "layers[0]: gn_weight must be true or false"},
      {"feature_map for performer", layer({{"mixer", "performer"}, {"feature_map", "elu"}}),
       "layers[0]: unknown key \"feature_map\" for mixer performer"},
      {"value_dim for another mixer", layer({{"mixer", "attention"}, {"value_dim", 64}}),
       "layers[0]: unknown key \"value_dim\" for mixer attention"},
      {"sinusoidal odd d_model",
       [](json& j) {
         j["position"] = "sinusoidal";
         j["d_model"] = 33;
       },
       "sinusoidal positions need an even d_model, got 33"},
      {"layer not an object", layer("she"), "layers[0]: must be an object"},
      {"no mixer", layer({{"window", 4}}), "layers[0]: missing key \"mixer\""},
      {"unknown mixer", layer({{"mixer", "mamba"}}), "layers[0]: unknown mixer \"mamba\""},
      {"mixer not a string", layer({{"mixer", 3}}), "layers[0]: mixer must be a string"},
      {"key of another mixer", layer({{"mixer", "she"}, {"heads", 2}}),
       "layers[0]: unknown key \"heads\" for mixer she (allowed: mixer, out_proj, window)"},
      {"key for no mixer", layer({{"mixer", "rwkv"}, {"window", 2}}),
       "layers[0]: unknown key \"window\" for mixer rwkv (allowed: mixer)"},
      {"heads do not divide", layer({{"mixer", "attention"}, {"heads", 3}}),
       "layers[0]: heads=3 must divide d_model=32"},
      {"zero heads", layer({{"mixer", "linear"}, {"heads", 0}}),
       "layers[0]: heads=0 must divide d_model=32"},
      {"negative heads", layer({{"mixer", "performer"}, {"heads", -4}}),
       "layers[0]: heads=-4 must divide d_model=32"},
      {"string heads", layer({{"mixer", "retnet"}, {"heads", "2"}}),
       "layers[0]: heads must be an integer, got \"2\""},
      {"rope with odd head size", layer({{"mixer", "attention"}, {"heads", 32}, {"rope", true}}),
       "layers[0]: RoPE needs an even head size, got 1"},
      {"retnet with odd head size", layer({{"mixer", "retnet"}, {"heads", 32}}),
       "layers[0]: RoPE needs an even head size, got 1"},
      {"zero window", layer({{"mixer", "me"}, {"window", 0}}),
       "layers[0]: window=0 must be in [1, max_seq_len=64]"},
      {"window too long", layer({{"mixer", "he"}, {"window", 65}}),
       "layers[0]: window=65 must be in [1, max_seq_len=64]"},
      {"fractional window", layer({{"mixer", "we"}, {"window", 2.5}}),
       "layers[0]: window must be an integer, got 2.5"},
      {"aft_local default beyond max_seq_len",
       [](json& j) {
         j["max_seq_len"] = 16;
         j["layers"][0] = {{"mixer", "aft_local"}};
       },
       "layers[0]: window=32 must be in [1, max_seq_len=16]"},
      {"zero features", layer({{"mixer", "performer"}, {"features", 0}}),
       "layers[0]: features must be a positive integer, got 0"},
      // Types and ranges beyond config.py.
      {"bias not a bool", set("bias", "yes"), "bias must be true or false, got \"yes\""},
      {"tie not a bool", set("tie_embeddings", 1), "tie_embeddings must be true or false, got 1"},
      {"rope not a bool", layer({{"mixer", "attention"}, {"rope", "true"}}),
       "layers[0]: rope must be true or false"},
      {"out_proj not a bool", layer({{"mixer", "she"}, {"out_proj", 0}}),
       "layers[0]: out_proj must be true or false"},
      {"embed_scale not a number", set("embed_scale", "sqrt(d)"),
       "embed_scale must be a number, got \"sqrt(d)\""},
      {"zero norm_eps", set("norm_eps", 0), "norm_eps must be positive"},
      {"negative eps", layer({{"mixer", "linear"}, {"eps", -1e-6}}),
       "layers[0]: eps must be positive"},
      {"zero gn_eps", layer({{"mixer", "retnet"}, {"gn_eps", 0}}),
       "layers[0]: gn_eps must be positive"},
      {"zero rope_base", layer({{"mixer", "attention"}, {"rope_base", 0}}),
       "layers[0]: rope_base must be positive"},
      // float fields: a double beyond float's range would become infinite (found by fuzz/)
      {"eps beyond float", layer({{"mixer", "linear"}, {"eps", 1e206}}),
       "layers[0]: eps is out of the float range: 1e+206"},
      {"embed_scale beyond float", set("embed_scale", -1e39),
       "embed_scale is out of the float range"},
      {"eps that rounds to 0 in float", layer({{"mixer", "performer"}, {"eps", 1e-60}}),
       "layers[0]: eps must be positive"},
      {"bos beyond the vocabulary", set("bos_id", 100),
       "bos_id=100 must be -1 (none) or a token id below vocab_size=100"},
      {"eos below -1", set("eos_id", -2), "eos_id=-2 must be -1 (none)"},
      {"fractional eos", set("eos_id", 2.0), "eos_id must be an integer, got 2.0"},
  };
  for (const BadConfig& c : cases) {
    json j = base_config();
    c.edit(j);
    const std::string error = parse_error(j);
    EXPECT_EQ(error.rfind("config.json: ", 0), 0u) << c.what << ": " << error;
    EXPECT_NE(error.find(c.message), std::string::npos)
        << c.what << ": expected \"" << c.message << "\" in \"" << error << "\"";
  }
}

TEST(ModelConfig, NotJsonOrNotAnObject) {
  for (const std::string text : {"", "{", "[1, 2]", "42", "{\"vocab_size\": 1,}"}) {
    try {
      parse_model_config(text);
      FAIL() << text;
    } catch (const ModelError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("config.json: ", 0), 0u) << e.what();
    }
  }
}

// config.py completes every layer (mixer, keys) before it checks the model's numbers, so a
// config with several faults reports the same one in both languages.
TEST(ModelConfig, ReportsTheFirstFaultTheReferenceWould) {
  json j = base_config({{{"mixer", "she"}}, {{"mixer", "mamba"}}});
  j["vocab_size"] = 0;
  EXPECT_NE(parse_error(j).find("layers[1]: unknown mixer"), std::string::npos) << parse_error(j);
  j["layers"][1] = {{"mixer", "she"}, {"window", 0}};
  EXPECT_NE(parse_error(j).find("vocab_size must be a positive integer"), std::string::npos)
      << parse_error(j);
  j["vocab_size"] = 100;
  j["position"] = "rotary";
  EXPECT_NE(parse_error(j).find("position must be one of"), std::string::npos) << parse_error(j);
}

TEST(ModelConfig, ShippedConfigsLoad) {
  namespace fs = std::filesystem;
  const fs::path root = MIXSERVE_SOURCE_DIR;
  int loaded = 0;
  for (const fs::path& dir : {root / "models", root / "tests" / "golden"}) {
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (entry.path().filename() != "config.json") continue;
      EXPECT_NO_THROW(load_model_config(entry.path().string())) << entry.path();
      ++loaded;
    }
  }
  EXPECT_GE(loaded, 12);
  try {
    load_model_config("/nonexistent/config.json");
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/config.json: cannot open");
  }
}

}  // namespace
}  // namespace mixserve
