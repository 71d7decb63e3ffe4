// `mixserve serve`: the engines behind the gRPC service and the REST gateway, with metrics,
// API keys, TLS, and a draining shutdown on SIGTERM/SIGINT.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include "app/backend_select.h"
#include "app/commands.h"
#include "cli/flags.h"
#include "engine/mixers/registry.h"
#include "server/grpc_service.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/rest_gateway.h"
#include "server/session_persistence.h"

namespace mixserve {

namespace {
std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}
}  // namespace

namespace {
// Every flag of `mixserve serve`, typed, with its default.
struct ServeFlags {
  std::vector<std::string> models, served_names, chat_templates, api_keys;
  std::string host = "127.0.0.1", backend = "auto", weights = "auto", kv_cache = "f32",
              api_key_file, tls_cert, tls_key, static_dir = "clients/playground";
  int grpc_port = 50051, http_port = 8000, threads = 0, max_batch = 256, max_queue = 1024,
      step_token_budget = 512, prefill_chunk = 256, cache_entries = 4096, http_threads = 4;
  int64_t pool_bytes = 0, max_body_bytes = 1048576, max_prompt_chars = 262144, max_tokens_limit = 0;
  double gpu_memory_fraction = 0, gpu_memory_utilization = 0, session_ttl = 600, drain_seconds = 30,
         header_timeout = 10, body_timeout = 30, write_timeout = 30, idle_timeout = 60;
  bool auth_exempt_health = true;
  std::string session_dir;
  std::vector<std::string> allowed_origins;
  double engine_stall_seconds = 60;
  std::string log_level = "info", log_format = "text";
  bool log_prompts = false;
  bool overlap_steps = false;
};

void add_serve_flags(CLI::App& app, ServeFlags& f) {
  using cli::add_list;
  add_list(app, "--model", f.models,
           "model directory; repeat for several models (model id = directory name) (default "
           "models/default)")
      ->type_name("DIR");
  add_list(app, "--served-model-name", f.served_names,
           "the id clients use for a model instead of its directory's name; repeat once per "
           "--model, in order");
  add_list(app, "--chat-template", f.chat_templates,
           "Jinja chat template file for /v1/chat/completions and gRPC Chat, replacing the model "
           "directory's; give "
           "it once for every model or once per --model, in order")
      ->type_name("FILE");
  app.add_option("--host", f.host, "address to bind both ports to")->capture_default_str();
  app.add_option("--grpc-port", f.grpc_port, "gRPC port (0: any free port)")
      ->check(cli::port())
      ->capture_default_str();
  app.add_option("--http-port,--port", f.http_port, "REST port (0: any free port)")
      ->check(cli::port())
      ->capture_default_str();
  app.add_option("--backend", f.backend, "auto (CUDA when a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--threads", f.threads, "CPU backend threads (0: all cores)")
      ->check(cli::non_negative())
      ->capture_default_str();
  app.add_option("--weights", f.weights,
                 "projections stored as: auto (as shipped: float16 when exact, else float32), f32, "
                 "f16, int8 (per output channel), int4 (per 32 inputs) (docs/weight-formats.md)")
      ->check(CLI::IsMember({"auto", "f32", "f16", "int8", "int4"}))
      ->capture_default_str();
  app.add_option("--kv-cache", f.kv_cache,
                 "attention's K/V cache: f32, or f16 (half the bytes a step reads, as llama.cpp's "
                 "default; CPU backend)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  app.add_option("--pool-bytes", f.pool_bytes,
                 "state-pool size per model in bytes (0: 256 MiB on the CPU; on a GPU see "
                 "--gpu-memory-fraction)")
      ->check(cli::integer(0))
      ->capture_default_str();
  auto* fraction =
      app.add_option(
             "--gpu-memory-fraction", f.gpu_memory_fraction,
             "CUDA, --pool-bytes 0: state pool = this fraction of the device memory free after "
             "loading the weights (0: half of it, at most 4 GiB)")
          ->check(cli::fraction())
          ->capture_default_str();
  app.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "vLLM's: CUDA, the whole server within this fraction of the device's TOTAL "
                 "memory; the state pools "
                 "get what the weights leave (unset: see --gpu-memory-fraction)")
      ->check(cli::number(0, 1, true))
      ->excludes(fraction);
  app.add_option("--max-batch,--max-num-seqs", f.max_batch, "running requests per model")
      ->check(cli::count())
      ->capture_default_str();
  app.add_option("--max-queue", f.max_queue,
                 "waiting requests per model; beyond it: 429 / RESOURCE_EXHAUSTED")
      ->check(cli::count())
      ->capture_default_str();
  app.add_option("--step-token-budget,--max-num-batched-tokens", f.step_token_budget,
                 "rows per engine step (decode rows + prefill chunks)")
      ->check(cli::count())
      ->capture_default_str();
  app.add_option("--prefill-chunk", f.prefill_chunk, "prefill chunk size in tokens")
      ->check(cli::count())
      ->capture_default_str();
  cli::add_bool(app, "--overlap-steps", f.overlap_steps,
                "queue each engine step before the previous one's tokens reach the host (pays on "
                "a GPU; docs/scheduler.md)");
  app.add_option("--cache-entries", f.cache_entries,
                 "prefix-cache and session entries per model (0: off)")
      ->check(cli::non_negative())
      ->capture_default_str();
  app.add_option("--session-ttl", f.session_ttl, "seconds a named session's state is kept")
      ->check(cli::number(0, 365 * 86400, true))
      ->capture_default_str();
  app.add_option("--session-dir", f.session_dir,
                 "keep named sessions across restarts: written to DIR/<model id>/ on drain, "
                 "restored at start-up (default: none, sessions end with the process)")
      ->type_name("DIR");
  app.add_option("--max-body-bytes", f.max_body_bytes, "largest request body (413 beyond)")
      ->check(cli::count())
      ->capture_default_str();
  app.add_option("--max-prompt-chars", f.max_prompt_chars, "largest prompt text in bytes")
      ->check(cli::count())
      ->capture_default_str();
  app.add_option("--max-tokens-limit", f.max_tokens_limit,
                 "largest max_tokens a request may ask for (0: the model's context)")
      ->check(cli::non_negative())
      ->capture_default_str();
  add_list(app, "--api-key", f.api_keys, "API key clients must send (Bearer); repeat for several");
  app.add_option("--api-key-file", f.api_key_file, "file with one API key per line")
      ->type_name("FILE");
  cli::add_bool(app, "--auth-exempt-health", f.auth_exempt_health,
                "serve /health, /ready and /metrics without a key");
  app.add_option("--tls-cert,--ssl-certfile", f.tls_cert,
                 "PEM certificate chain: enables TLS on gRPC and HTTPS on REST")
      ->type_name("FILE");
  app.add_option("--tls-key,--ssl-keyfile", f.tls_key, "PEM private key for --tls-cert")
      ->type_name("FILE");
  app.add_option(
         "--drain-seconds", f.drain_seconds,
         "on SIGTERM, how long in-flight requests may take to finish (0: cancel them at once)")
      ->check(cli::number(0, 86400))
      ->capture_default_str();
  app.add_option("--http-threads", f.http_threads, "REST I/O threads")
      ->check(cli::integer(1, 1024))
      ->capture_default_str();
  app.add_option("--header-timeout", f.header_timeout,
                 "seconds a client has to send its request headers")
      ->check(cli::seconds())
      ->capture_default_str();
  app.add_option("--body-timeout", f.body_timeout, "seconds a client has to send its request body")
      ->check(cli::seconds())
      ->capture_default_str();
  app.add_option("--write-timeout", f.write_timeout,
                 "seconds a response write may wait on a client that does not read; then the "
                 "connection closes "
                 "and the request is cancelled")
      ->check(cli::seconds())
      ->capture_default_str();
  app.add_option("--idle-timeout", f.idle_timeout,
                 "seconds an idle keep-alive connection stays open")
      ->check(cli::seconds())
      ->capture_default_str();
  app.add_option("--static-dir", f.static_dir, "files served at / (the playground); empty: none")
      ->type_name("DIR")
      ->capture_default_str();
  app.add_option("--allowed-origins", f.allowed_origins,
                 "origins whose web pages may call the REST API (CORS), comma-separated or "
                 "repeated; * allows any (default: none)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--engine-stall-seconds", f.engine_stall_seconds,
                 "/health answers 503 and gRPC health NOT_SERVING while an engine has been inside "
                 "one step this long (0: never)")
      ->check(cli::number(0, 86400))
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--log-format", f.log_format, "text, or json: one JSON object a line (on stderr)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cli::add_bool(app, "--log-prompts", f.log_prompts,
                "put prompts and completions in the request log lines (never by default)");
}

// The test-only stall of docs/api.md ("Liveness"): while the file MIXSERVE_TEST_STALL_FILE names
// exists, every engine step that has work waits before it runs.
std::function<void()> test_stall_hook() {
  const char* file = std::getenv("MIXSERVE_TEST_STALL_FILE");
  if (!file || !*file) return nullptr;
  return [path = std::string(file)] {
    while (std::ifstream(path).good()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}
}  // namespace

int serve_command(int argc, char** argv) {
  CLI::App app(
      "Serves models over gRPC (mixserve.v1.TextGeneration) and an OpenAI-compatible REST API.",
      "mixserve serve");
  cli::setup(app, "MIXSERVE_");
  ServeFlags a;
  add_serve_flags(app, a);
  cli::finish(app);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  // Flags that must agree with each other: refused before anything loads, as a bad value is.
  std::vector<std::string> dirs = a.models;
  if (dirs.empty()) dirs.push_back("models/default");
  const auto usage_error = [](const std::string& msg) {
    std::cerr << "error: " << msg << " (see mixserve serve --help)" << std::endl;
    return 2;
  };
  if (!a.served_names.empty() && a.served_names.size() != dirs.size())
    return usage_error("--served-model-name is given " + std::to_string(a.served_names.size()) +
                       " times for " + std::to_string(dirs.size()) +
                       " models; give one per --model");
  for (const std::string& n : a.served_names)
    if (n.empty()) return usage_error("--served-model-name must not be empty");
  if (a.chat_templates.size() > 1 && a.chat_templates.size() != dirs.size())
    return usage_error("--chat-template is given " + std::to_string(a.chat_templates.size()) +
                       " times for " + std::to_string(dirs.size()) +
                       " models; give it once for all or once per --model");
  if (a.gpu_memory_utilization > 0 && a.pool_bytes > 0)
    return usage_error(
        "--gpu-memory-utilization and --pool-bytes both size the state pool; give one");
  LogOptions log;
  log.level = a.log_level, log.json = a.log_format == "json", log.prompts = a.log_prompts;
  setup_logging(log);
  // Signals go to sigwait() below, not to whichever thread the kernel picks.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  try {
    ModelHub hub;
    Metrics metrics;
    hub.metrics = &metrics;
    hub.limits.max_body_bytes = a.max_body_bytes;
    hub.limits.max_prompt_chars = a.max_prompt_chars;
    hub.limits.max_tokens_cap = a.max_tokens_limit;
    std::vector<std::string> keys = a.api_keys;
    keys.erase(std::remove(keys.begin(), keys.end(), std::string()), keys.end());
    if (!a.api_key_file.empty()) {
      std::istringstream lines(read_text(a.api_key_file));
      // Surrounding whitespace (a CRLF file's \r, a stray space) is no part of a key, and a blank
      // line is no key: kept, " " would let "authorization: Bearer  " through on gRPC.
      for (std::string line; std::getline(lines, line);) {
        const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
        if (b != std::string::npos) keys.push_back(line.substr(b, e - b + 1));
      }
    }
    ApiKeys api_keys(keys);
    SessionPersistence sessions(a.session_dir, log_event);
    const std::vector<std::string>& names = a.served_names;
    const std::vector<std::string>& templates = a.chat_templates;
    for (size_t i = 0; i < dirs.size(); ++i) {
      const std::string& dir = dirs[i];
      auto served = std::make_unique<ServedModel>();
      served->model = load_model_dir(dir);
      if (!templates.empty()) {
        const std::string& file = templates[templates.size() == 1 ? 0 : i];
        served->model.set_chat_template(read_text(file), file);
      }
      if (!served->model.chat_template_error.empty())
        std::cerr << "warning: " << served->model.chat_template_error
                  << " (chat requests are refused until --chat-template gives one that parses)"
                  << std::endl;
      if (!names.empty()) served->model.id = names[i];
      if (hub.find(served->model.id) && !hub.models().empty() &&
          hub.find(served->model.id)->model.id == served->model.id)
        throw std::invalid_argument("two models have the id \"" + served->model.id + "\"");
      for (const auto& l : served->model.config.layers)
        served->mixers.push_back(mixer_kind_name(l.kind));
      EngineOptions eo;
      eo.max_batch = a.max_batch;
      eo.max_queue = a.max_queue;
      eo.step_token_budget = a.step_token_budget;
      eo.prefill_chunk = a.prefill_chunk;
      eo.cache_entries = a.cache_entries;
      eo.overlap_steps = a.overlap_steps;
      eo.session_ttl_s = a.session_ttl;
      eo.on_step = metrics.add_model(served->model.id, served->model.config, served->mixers);
      eo.before_busy_step = test_stall_hook();
      BackendChoice choice;
      choice.backend = a.backend;
      choice.pool_bytes = a.pool_bytes;
      choice.gpu_memory_fraction = a.gpu_memory_fraction;
      choice.gpu_memory_utilization = a.gpu_memory_utilization;
      choice.models_left = static_cast<int>(dirs.size() - i);
      choice.threads = a.threads;
      choice.weights = *parse_weight_format(a.weights);
      choice.kv_cache = kv_cache_from_flag(a.kv_cache);
      auto backend = make_backend(served->model, choice);
      served->backend = backend->name();
      served->engine = std::make_unique<Engine>(served->model, std::move(backend), eo);
      if (sessions.enabled()) sessions.restore(*served);  // before it serves a turn
      served->engine->start();
      std::cout << "model " << served->model.id << " (" << served->model.format << ", "
                << served->backend << ", weights " << a.weights << ", kv cache " << a.kv_cache
                << ", tokenizer " << served->model.tokenizer_kind()
                << (served->model.chat_template ? ", chat template" : "")
                << "): " << served->model.config.n_layers << " layers, context "
                << served->model.config.max_seq_len << std::endl;
      hub.add(std::move(served));
    }
    const bool tls = !a.tls_cert.empty() || !a.tls_key.empty();
    // gRPC
    TextGenerationService service(hub, api_keys);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (tls) {
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({read_text(a.tls_key), read_text(a.tls_cert)});
      creds = grpc::SslServerCredentials(ssl);
    }
    int grpc_port = 0;
    builder.AddListeningPort(a.host + ":" + std::to_string(a.grpc_port), creds, &grpc_port);
    builder.SetMaxReceiveMessageSize(static_cast<int>(hub.limits.max_body_bytes));
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
    if (!grpc_server || grpc_port == 0)
      throw std::runtime_error("cannot listen for gRPC on " + a.host + ":" +
                               std::to_string(a.grpc_port));
    grpc_server->GetHealthCheckService()->SetServingStatus(true);
    // REST
    RestOptions ro;
    ro.auth_exempt_health = a.auth_exempt_health;
    ro.static_dir = a.static_dir;
    ro.allowed_origins = a.allowed_origins;
    ro.engine_stall_seconds = a.engine_stall_seconds;
    RestGateway rest(hub, api_keys, &metrics, ro);
    HttpServerOptions ho;
    ho.host = a.host;
    ho.port = a.http_port;
    ho.threads = a.http_threads;
    ho.max_body_bytes = static_cast<size_t>(hub.limits.max_body_bytes);
    ho.header_timeout = ms(a.header_timeout);
    ho.body_timeout = ms(a.body_timeout);
    ho.write_timeout = ms(a.write_timeout);
    ho.idle_timeout = ms(a.idle_timeout);
    if (tls) {
      ho.tls_cert_file = a.tls_cert;
      ho.tls_key_file = a.tls_key;
    }
    HttpServer http(
        ho, [&rest](const HttpRequest& r, std::shared_ptr<HttpExchange> ex) { rest.handle(r, ex); },
        [](int status, const std::string& msg) { return RestGateway::error_json(status, msg); });
    http.start();
    std::cout << "listening: grpc " << a.host << ":" << grpc_port << (tls ? " (TLS)" : "")
              << ", http" << (tls ? "s" : "") << " " << a.host << ":" << http.port() << std::endl;
    // gRPC health follows the engines: NOT_SERVING while one is stalled (as /health's 503).
    std::atomic<bool> watching{true};
    std::thread watchdog([&] {
      bool stalled = false;
      while (watching) {
        const auto stall = hub.stalled(a.engine_stall_seconds);
        if (stall.has_value() != stalled && !hub.draining) {
          stalled = stall.has_value();
          grpc_server->GetHealthCheckService()->SetServingStatus(!stalled);
          if (stalled)
            log_event("error", "engine_stall",
                      "model " + stall->model + ": one engine step has run for " +
                          std::to_string(stall->seconds) + " s (--engine-stall-seconds " +
                          std::to_string(a.engine_stall_seconds) + "): health is NOT_SERVING");
          else
            log_event("info", "engine_recovered", "every engine completes its steps again");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    // Wait for SIGTERM/SIGINT, then drain.
    int sig = 0;
    sigwait(&signals, &sig);
    // Draining from the signal on: a request that comes while the watchdog finishes its sleep
    // (up to 100 ms) is refused too (reliability_sigterm_under_load once had one served, 200,
    // 0.1 s after the SIGTERM under ASan). Health goes NOT_SERVING once the watchdog, which could
    // still set it, has stopped.
    hub.draining = true;
    std::cout << "signal " << sig << ": draining (up to " << a.drain_seconds << " s)" << std::endl;
    watching = false;
    watchdog.join();
    grpc_server->GetHealthCheckService()->SetServingStatus(false);
    const auto until = std::chrono::steady_clock::now() + ms(a.drain_seconds);
    auto busy = [&] {
      for (const auto& m : hub.models())
        if (!m->engine->idle()) return true;
      return false;
    };
    while (busy() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool clean = !busy();
    grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    for (const auto& m : hub.models()) m->engine->stop();  // anything left ends as cancelled
    if (sessions.enabled()) sessions.save(hub);  // every turn that finished has kept its state
    // Every REST response the engines' last events end (a 503 for each cancelled request) is
    // handed to its connection before the connections close, then written to its last byte:
    // up to 2 s, which only a client that has stopped reading uses up. (A fixed 100 ms for the
    // writing cut streams off before their final event under load: one ASan run of
    // reliability_sigterm_under_load, 600 streams.)
    const auto handed_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (rest.open_completions() > 0 && std::chrono::steady_clock::now() < handed_by)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!http.drain(std::chrono::steady_clock::now() + std::chrono::seconds(2)))
      log_event("warn", "shutdown_unwritten",
                "some REST responses were not written to the end within 2 s (clients not reading)");
    http.stop();
    std::cout << "stopped"
              << (clean ? "" : " (grace period over: remaining requests were cancelled)")
              << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace mixserve
