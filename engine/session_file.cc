#include "engine/session_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "engine/model_weights.h"

namespace mixserve {

static_assert(std::endian::native == std::endian::little,
              "session files are little-endian and written by memcpy");

namespace {

constexpr char kMagic[8] = {'M', 'I', 'X', 'S', 'E', 'S', 'S', '\0'};
// The most a file's counts may claim before any allocation: a damaged count must give an error,
// not a multi-gigabyte vector. Real sizes are bounded by the bytes actually present anyway.
constexpr uint64_t kMaxLayers = 1 << 16;

constexpr uint64_t kFnvOffset = 14695981039346656037ull, kFnvPrime = 1099511628211ull;
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

class Hasher {
 public:
  template <class T>
  void add(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    h_ = fnv1a(h_, &v, sizeof v);
  }
  void add(const std::string& s) {
    add(static_cast<uint64_t>(s.size()));  // lengths too, so "ab"+"c" differs from "a"+"bc"
    h_ = fnv1a(h_, s.data(), s.size());
  }
  void add_floats(const float* p, size_t n) { h_ = fnv1a(h_, p, n * sizeof(float)); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kFnvOffset;
};

class Writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <class T>
  void put_array(const std::vector<T>& v) {
    if (v.empty()) return;  // data() may be null, which no copy may be given (UBSan)
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Reads with bounds checks; any read past the end sets failed() and yields zeros.
class Reader {
 public:
  Reader(const std::string& b, size_t end) : b_(b), end_(end) {}
  template <class T>
  T get() {
    T v{};
    if (!take(sizeof v)) return v;
    std::memcpy(&v, b_.data() + at_ - sizeof v, sizeof v);
    return v;
  }
  template <class T>
  bool get_array(uint64_t n, std::vector<T>& out) {
    if (n > (end_ - at_) / sizeof(T)) return fail_();
    out.resize(n);
    if (n == 0) return true;  // an empty vector's data() may be null: memcpy must not get it
    std::memcpy(out.data(), b_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return true;
  }
  bool get_string(uint64_t n, std::string& out) {
    if (n > end_ - at_) return fail_();
    out.assign(b_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool failed() const { return failed_; }
  size_t left() const { return end_ - at_; }

 private:
  bool take(size_t n) {
    if (n > end_ - at_) return fail_();
    at_ += n;
    return true;
  }
  bool fail_() {
    failed_ = true;
    return false;
  }
  const std::string& b_;
  size_t at_ = 0, end_;
  bool failed_ = false;
};

SessionFileResult error(SessionFileStatus s, const std::string& what) {
  static const char* const kinds[] = {"", "I/O error", "corrupt", "unsupported version", "foreign"};
  return {s, std::string(kinds[static_cast<int>(s)]) + ": " + what};
}

std::string hex(uint64_t v) {
  std::ostringstream o;
  o << std::hex << v;
  return o.str();
}

}  // namespace

uint64_t model_fingerprint(const LoadedModel& model, const std::vector<StateLayout>& layouts) {
  Hasher h;
  const ModelConfig& c = model.config;
  h.add(c.vocab_size), h.add(c.d_model), h.add(c.n_layers), h.add(c.ffn_dim), h.add(c.max_seq_len);
  h.add(static_cast<int>(c.position)), h.add(c.embed_scale), h.add(static_cast<int>(c.norm));
  h.add(c.norm_eps);
  h.add(static_cast<int>(c.activation)), h.add(static_cast<int>(c.ffn));
  h.add(c.bias), h.add(c.head_bias), h.add(c.tie_embeddings), h.add(c.embed_norm);
  h.add(c.bos_id), h.add(c.eos_id), h.add(static_cast<int>(c.kv_cache));
  for (const LayerConfig& l : c.layers) {
    h.add(static_cast<int>(l.kind)), h.add(l.heads), h.add(l.rope), h.add(l.rope_base);
    h.add(l.window), h.add(l.out_proj), h.add(l.gn_eps), h.add(l.eps), h.add(l.features);
    h.add(l.value_dim), h.add(static_cast<int>(l.rope_style)),
        h.add(static_cast<int>(l.group_norm));
    h.add(l.decay_normalize), h.add(l.gn_weight), h.add(static_cast<int>(l.feature_map));
    h.add(l.q_scale), h.add(l.normalize);
  }
  for (const StateLayout& s : layouts) {
    h.add(s.fixed_floats), h.add(s.token_floats);
    for (const StateTensor& t : s.tensors) {
      h.add(t.name), h.add(t.offset), h.add(t.per_token), h.add(t.init);
      for (int64_t d : t.shape) h.add(d);
    }
  }
  if (const Tokenizer* tok = model.tokenizer.get()) {
    h.add(tok->kind());
    h.add(tok->vocab_size());
    for (int32_t id = 0; id < tok->vocab_size(); ++id) {
      try {
        h.add(tok->id_to_piece(id));
      } catch (const std::out_of_range&) {  // an id the tokenizer leaves unassigned
        h.add(std::string("\0unassigned", 11));
      }
    }
  }
  if (model.weights) {
    for (const WeightSpec& w : expected_weights(c)) {
      if (!model.weights->has(w.name)) continue;
      h.add(w.name);
      int64_t n = 1;
      for (int64_t d : w.shape) h.add(d), n *= d;
      const float* p = model.weights->get(w.name);
      const int64_t k = std::min<int64_t>(n, 64);
      h.add_floats(p, k);
      h.add_floats(p + n - k, k);
    }
  }
  return h.value();
}

std::string encode_session(uint64_t fingerprint, const SessionRecord& r) {
  Writer w;
  w.bytes().append(kMagic, sizeof kMagic);
  w.put(kSessionFileVersion);
  w.put(fingerprint);
  w.put(static_cast<uint32_t>(r.id.size()));
  w.bytes() += r.id;
  w.put(r.last_used_unix_ms);
  w.put(r.saved_unix_ms);
  w.put(r.ttl_left_ms);
  w.put(static_cast<uint32_t>(r.tokens.size()));
  w.put_array(r.tokens);
  w.put(static_cast<uint32_t>(r.logits.size()));
  w.put_array(r.logits);
  w.put(static_cast<uint32_t>(r.layers.size()));
  for (const auto& l : r.layers) {
    w.put(static_cast<uint64_t>(l.size()));
    w.put_array(l);
  }
  w.put(fnv1a(kFnvOffset, w.bytes().data(), w.bytes().size()));
  return std::move(w.bytes());
}

SessionFileResult decode_session(const std::string& b, uint64_t fingerprint, SessionRecord& out) {
  constexpr size_t kHead = sizeof kMagic + sizeof(uint32_t) + sizeof(uint64_t);
  if (b.size() < sizeof kMagic || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0)
    return error(SessionFileStatus::kCorrupt, "not a mixserve session file (wrong magic)");
  if (b.size() < kHead + sizeof(uint64_t))
    return error(SessionFileStatus::kCorrupt, "truncated (" + std::to_string(b.size()) + " bytes)");
  uint32_t version;
  std::memcpy(&version, b.data() + sizeof kMagic, sizeof version);
  // The version is read before the checksum: a later format may checksum differently, and
  // "version 2" says more than "checksum mismatch".
  if (version != kSessionFileVersion)
    return error(SessionFileStatus::kVersion, "format version " + std::to_string(version) +
                                                  ", this build reads version " +
                                                  std::to_string(kSessionFileVersion));
  const size_t body = b.size() - sizeof(uint64_t);
  uint64_t stored;
  std::memcpy(&stored, b.data() + body, sizeof stored);
  if (stored != fnv1a(kFnvOffset, b.data(), body))
    return error(SessionFileStatus::kCorrupt,
                 "checksum mismatch (the file is damaged or truncated)");
  Reader r(b, body);
  r.get<std::array<char, sizeof kMagic>>();
  r.get<uint32_t>();
  const uint64_t fp = r.get<uint64_t>();
  if (fp != fingerprint)
    return error(SessionFileStatus::kForeign, "written for another model (fingerprint " + hex(fp) +
                                                  ", this model's is " + hex(fingerprint) + ")");
  SessionRecord s;
  r.get_string(r.get<uint32_t>(), s.id);
  s.last_used_unix_ms = r.get<int64_t>();
  s.saved_unix_ms = r.get<int64_t>();
  s.ttl_left_ms = r.get<int64_t>();
  r.get_array(r.get<uint32_t>(), s.tokens);
  r.get_array(r.get<uint32_t>(), s.logits);
  const uint32_t n_layers = r.get<uint32_t>();
  if (n_layers > kMaxLayers)
    return error(SessionFileStatus::kCorrupt, std::to_string(n_layers) + " layers");
  s.layers.resize(n_layers);
  for (auto& l : s.layers)
    if (!r.get_array(r.get<uint64_t>(), l)) break;
  if (r.failed()) return error(SessionFileStatus::kCorrupt, "a size runs past the end of the file");
  if (r.left() != 0)
    return error(SessionFileStatus::kCorrupt,
                 std::to_string(r.left()) + " bytes after the last layer");
  if (s.id.empty()) return error(SessionFileStatus::kCorrupt, "empty session id");
  if (s.tokens.empty()) return error(SessionFileStatus::kCorrupt, "no tokens");
  out = std::move(s);
  return {};
}

SessionFileResult write_session_file(const std::string& path, uint64_t fingerprint,
                                     const SessionRecord& r) {
  const std::string bytes = encode_session(fingerprint, r);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return error(SessionFileStatus::kIo, "cannot create " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  // fsync before rename: otherwise a power cut can leave the new name pointing at empty blocks.
  const bool ok = done == bytes.size() && ::fsync(fd) == 0;
  const int saved_errno = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(ok ? errno : saved_errno);
    ::unlink(tmp.c_str());
    return error(SessionFileStatus::kIo, "cannot write " + path + ": " + why);
  }
  return {};
}

SessionFileResult read_session_file(const std::string& path, uint64_t fingerprint,
                                    SessionRecord& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error(SessionFileStatus::kIo, "cannot open " + path);
  const std::string bytes((std::istreambuf_iterator<char>(f)), {});
  if (f.bad()) return error(SessionFileStatus::kIo, "cannot read " + path);
  return decode_session(bytes, fingerprint, out);
}

}  // namespace mixserve
