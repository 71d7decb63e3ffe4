// `mixserve serve`: the engines behind the gRPC service and the REST gateway, with metrics,
// API keys, TLS, and a draining shutdown on SIGTERM/SIGINT.
#include <csignal>
#include <fstream>
#include <iostream>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include "engine/mixers/registry.h"
#include "server/backend_select.h"
#include "server/cli_args.h"
#include "server/commands.h"
#include "server/grpc_service.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/rest_gateway.h"

namespace mixserve {

namespace {
std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}
}  // namespace

int serve_command(int argc, char** argv) {
  CliArgs a("mixserve serve", "Serves models over gRPC (mixserve.v1.TextGeneration) and an OpenAI-compatible REST API.");
  a.flag("model", "", "model directory; repeat for several models (model id = directory name)", true);
  a.flag("served-model-name", "",
         "the id clients use for a model instead of its directory's name; repeat once per --model, in order",
         true);
  a.flag("chat-template", "",
         "Jinja chat template file for /v1/chat/completions and gRPC Chat, replacing the model "
         "directory's; give it once for every model or once per --model, in order",
         true);
  a.flag("host", "127.0.0.1", "address to bind both ports to");
  a.flag("grpc-port", "50051", "gRPC port (0: any free port)");
  a.flag("http-port", "8000", "REST port (0: any free port)");
  a.flag("backend", "auto", "auto (CUDA when a GPU is present), cpu or cuda");
  a.flag("threads", "0", "CPU backend threads (0: all cores)");
  a.flag("pool-bytes", "0", "state-pool size per model in bytes (0: 256 MiB on the CPU; on a GPU see --gpu-memory-fraction)");
  a.flag("gpu-memory-fraction", "0",
         "CUDA, --pool-bytes 0: state pool = this fraction of the device memory free after loading the weights "
         "(0: half of it, at most 4 GiB)");
  a.flag("max-batch", "256", "running requests per model");
  a.flag("max-queue", "1024", "waiting requests per model; beyond it: 429 / RESOURCE_EXHAUSTED");
  a.flag("step-token-budget", "512", "rows per engine step (decode rows + prefill chunks)");
  a.flag("prefill-chunk", "256", "prefill chunk size in tokens");
  a.flag("cache-entries", "4096", "prefix-cache and session entries per model (0: off)");
  a.flag("session-ttl", "600", "seconds a named session's state is kept");
  a.flag("max-body-bytes", "1048576", "largest request body (413 beyond)");
  a.flag("max-prompt-chars", "262144", "largest prompt text in bytes");
  a.flag("max-tokens-limit", "0", "largest max_tokens a request may ask for (0: the model's context)");
  a.flag("api-key", "", "API key clients must send (Bearer); repeat for several", true);
  a.flag("api-key-file", "", "file with one API key per line");
  a.flag("auth-exempt-health", "true", "serve /health, /ready and /metrics without a key (true/false)");
  a.flag("tls-cert", "", "PEM certificate chain: enables TLS on gRPC and HTTPS on REST");
  a.flag("tls-key", "", "PEM private key for --tls-cert");
  a.flag("drain-seconds", "30", "on SIGTERM, how long in-flight requests may take to finish");
  a.flag("http-threads", "4", "REST I/O threads");
  a.flag("header-timeout", "10", "seconds a client has to send its request headers");
  a.flag("body-timeout", "30", "seconds a client has to send its request body");
  a.flag("write-timeout", "30",
         "seconds a response write may wait on a client that does not read; then the connection "
         "closes and "
         "the request is cancelled");
  a.flag("idle-timeout", "60", "seconds an idle keep-alive connection stays open");
  a.flag("static-dir", "clients/playground", "files served at / (the playground); empty: none");
  std::string err;
  if (!a.parse(argc, argv, err)) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  if (a.help_requested()) {
    std::cout << a.help();
    return 0;
  }
  // Signals go to sigwait() below, not to whichever thread the kernel picks.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  try {
    if (const double f = a.number("gpu-memory-fraction"); !(f >= 0 && f <= 1))
      throw std::invalid_argument("--gpu-memory-fraction must be between 0 and 1");
    auto timeout = [&](const char* flag) {
      const double s = a.number(flag);
      if (!(s > 0 && s <= 86400))
        throw std::invalid_argument(std::string("--") + flag + " must be in (0, 86400] seconds");
      return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
    };
    const auto header_timeout = timeout("header-timeout"), body_timeout = timeout("body-timeout"),
               write_timeout = timeout("write-timeout"), idle_timeout = timeout("idle-timeout");
    ModelHub hub;
    Metrics metrics;
    hub.metrics = &metrics;
    hub.limits.max_body_bytes = a.integer("max-body-bytes");
    hub.limits.max_prompt_chars = a.integer("max-prompt-chars");
    hub.limits.max_tokens_cap = a.integer("max-tokens-limit");
    std::vector<std::string> keys = a.all("api-key");
    keys.erase(std::remove(keys.begin(), keys.end(), std::string()), keys.end());
    if (!a.str("api-key-file").empty()) {
      std::istringstream lines(read_text(a.str("api-key-file")));
      // Surrounding whitespace (a CRLF file's \r, a stray space) is no part of a key, and a blank
      // line is no key: kept, " " would let "authorization: Bearer  " through on gRPC.
      for (std::string line; std::getline(lines, line);) {
        const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
        if (b != std::string::npos) keys.push_back(line.substr(b, e - b + 1));
      }
    }
    ApiKeys api_keys(keys);
    std::vector<std::string> dirs = a.all("model");
    if (dirs.empty()) dirs.push_back("models/default");
    const std::vector<std::string> names = a.all("served-model-name");
    if (!names.empty() && names.size() != dirs.size())
      throw std::invalid_argument("--served-model-name is given " + std::to_string(names.size()) +
                                  " times for " + std::to_string(dirs.size()) + " models; give one per --model");
    const std::vector<std::string> templates = a.all("chat-template");
    if (templates.size() > 1 && templates.size() != dirs.size())
      throw std::invalid_argument("--chat-template is given " + std::to_string(templates.size()) +
                                  " times for " + std::to_string(dirs.size()) +
                                  " models; give it once for all or once per --model");
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
      if (!names.empty()) {
        if (names[i].empty()) throw std::invalid_argument("--served-model-name must not be empty");
        served->model.id = names[i];
      }
      if (hub.find(served->model.id) && !hub.models().empty() && hub.find(served->model.id)->model.id == served->model.id)
        throw std::invalid_argument("two models have the id \"" + served->model.id + "\"");
      for (const auto& l : served->model.config.layers) served->mixers.push_back(mixer_kind_name(l.kind));
      EngineOptions eo;
      eo.max_batch = static_cast<int>(a.integer("max-batch"));
      eo.max_queue = static_cast<int>(a.integer("max-queue"));
      eo.step_token_budget = static_cast<int32_t>(a.integer("step-token-budget"));
      eo.prefill_chunk = static_cast<int32_t>(a.integer("prefill-chunk"));
      eo.cache_entries = static_cast<int>(a.integer("cache-entries"));
      eo.session_ttl_s = a.number("session-ttl");
      eo.on_step = metrics.add_model(served->model.id, served->model.config, served->mixers);
      auto backend = make_backend(served->model, {a.str("backend"), a.integer("pool-bytes"), a.number("gpu-memory-fraction"),
                                                        static_cast<int>(a.integer("threads"))});
      served->backend = backend->name();
      served->engine = std::make_unique<Engine>(served->model, std::move(backend), eo);
      served->engine->start();
      std::cout << "model " << served->model.id << " (" << served->model.format << ", " << served->backend
                << ", tokenizer " << served->model.tokenizer_kind()
                << (served->model.chat_template ? ", chat template" : "") << "): "
                << served->model.config.n_layers << " layers, context " << served->model.config.max_seq_len << std::endl;
      hub.add(std::move(served));
    }
    const bool tls = !a.str("tls-cert").empty() || !a.str("tls-key").empty();
    // gRPC
    TextGenerationService service(hub, api_keys);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (tls) {
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({read_text(a.str("tls-key")), read_text(a.str("tls-cert"))});
      creds = grpc::SslServerCredentials(ssl);
    }
    int grpc_port = 0;
    builder.AddListeningPort(a.str("host") + ":" + a.str("grpc-port"), creds, &grpc_port);
    builder.SetMaxReceiveMessageSize(static_cast<int>(hub.limits.max_body_bytes));
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
    if (!grpc_server || grpc_port == 0) throw std::runtime_error("cannot listen for gRPC on " + a.str("host") + ":" + a.str("grpc-port"));
    grpc_server->GetHealthCheckService()->SetServingStatus(true);
    // REST
    RestOptions ro;
    ro.auth_exempt_health = a.str("auth-exempt-health") != "false";
    ro.static_dir = a.str("static-dir");
    RestGateway rest(hub, api_keys, &metrics, ro);
    HttpServerOptions ho;
    ho.host = a.str("host");
    ho.port = static_cast<int>(a.integer("http-port"));
    ho.threads = static_cast<int>(a.integer("http-threads"));
    ho.max_body_bytes = static_cast<size_t>(hub.limits.max_body_bytes);
    ho.header_timeout = header_timeout;
    ho.body_timeout = body_timeout;
    ho.write_timeout = write_timeout;
    ho.idle_timeout = idle_timeout;
    if (tls) {
      ho.tls_cert_file = a.str("tls-cert");
      ho.tls_key_file = a.str("tls-key");
    }
    HttpServer http(ho, [&rest](const HttpRequest& r, std::shared_ptr<HttpExchange> ex) { rest.handle(r, ex); },
                    [](int status, const std::string& msg) { return RestGateway::error_json(status, msg); });
    http.start();
    std::cout << "listening: grpc " << a.str("host") << ":" << grpc_port << (tls ? " (TLS)" : "") << ", http"
              << (tls ? "s" : "") << " " << a.str("host") << ":" << http.port() << std::endl;
    // Wait for SIGTERM/SIGINT, then drain.
    int sig = 0;
    sigwait(&signals, &sig);
    std::cout << "signal " << sig << ": draining (up to " << a.str("drain-seconds") << " s)" << std::endl;
    hub.draining = true;
    grpc_server->GetHealthCheckService()->SetServingStatus(false);
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(a.number("drain-seconds") * 1000));
    auto busy = [&] {
      for (const auto& m : hub.models())
        if (!m->engine->idle()) return true;
      return false;
    };
    while (busy() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool clean = !busy();
    grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    for (const auto& m : hub.models()) m->engine->stop();  // anything left ends as cancelled
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // last bytes of the streams
    http.stop();
    std::cout << "stopped" << (clean ? "" : " (grace period over: remaining requests were cancelled)") << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace mixserve
