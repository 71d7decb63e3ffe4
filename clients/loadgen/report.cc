#include "clients/loadgen/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>

#include "clients/common/common_flags.h"

namespace mixserve::client {

using json = nlohmann::json;

Slo parse_goodput(const std::vector<std::string>& items) {
  Slo slo;
  for (const auto& item : items) {
    for (const auto& kv : split(item, ' ')) {
      const size_t colon = kv.find(':');
      const std::string key = kv.substr(0, colon);
      double ms = -1;
      try {
        ms = colon == std::string::npos ? -1 : std::stod(kv.substr(colon + 1));
      } catch (const std::exception&) {
      }
      if (ms < 0)
        throw std::invalid_argument("--goodput takes KEY:MS with MS >= 0, got \"" + kv + "\"");
      if (key == "ttft")
        slo.ttft_ms = ms;
      else if (key == "tpot")
        slo.tpot_ms = ms;
      else if (key == "e2el")
        slo.e2el_ms = ms;
      else
        throw std::invalid_argument("--goodput keys are ttft, tpot and e2el, got \"" + key + "\"");
    }
  }
  return slo;
}

RequestMetrics metrics_of(const CompletionResult& r) {
  RequestMetrics m;
  m.ttft = r.ttft_s();
  m.e2el = r.e2e_s();
  m.output_tokens = r.has_usage ? r.completion_tokens : static_cast<uint32_t>(r.streamed_tokens);
  // TPOT as vLLM: the time after the first token spread over the tokens after it.
  if (m.output_tokens > 1 && m.ttft >= 0) m.tpot = (m.e2el - m.ttft) / (m.output_tokens - 1);
  // ITL, one sample per token: the gap since the previous message, split evenly over the k tokens
  // the message carries (k is 1 unless the server sent several tokens at once).
  for (size_t i = 0; i < r.token_events.size(); ++i) {
    const int k = r.token_events[i].second;
    if (i == 0) {
      m.itl.insert(m.itl.end(), k - 1, 0.0);  // tokens that came with the first one
      continue;
    }
    const double gap =
        std::chrono::duration<double>(r.token_events[i].first - r.token_events[i - 1].first)
            .count();
    m.itl.insert(m.itl.end(), k, gap / k);
  }
  return m;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}

namespace {

std::string pct_name(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", p);
  return std::string("p") + buf;
}

// mean_X_ms, median_X_ms, std_X_ms and pNN_X_ms of `seconds`.
void add_stats(json& j, const std::string& name, const std::vector<double>& seconds,
               const ReportOptions& o) {
  double mean = 0, var = 0;
  for (double x : seconds) mean += x;
  if (!seconds.empty()) mean /= seconds.size();
  for (double x : seconds) var += (x - mean) * (x - mean);
  if (!seconds.empty()) var /= seconds.size();
  j["mean_" + name + "_ms"] = mean * 1e3;
  j["median_" + name + "_ms"] = percentile(seconds, 50) * 1e3;
  j["std_" + name + "_ms"] = std::sqrt(var) * 1e3;
  for (double p : o.percentiles) j[pct_name(p) + "_" + name + "_ms"] = percentile(seconds, p) * 1e3;
}

bool meets(const RequestMetrics& m, const Slo& slo) {
  return (slo.ttft_ms < 0 || m.ttft * 1e3 <= slo.ttft_ms) &&
         (slo.tpot_ms < 0 || m.tpot * 1e3 <= slo.tpot_ms) &&
         (slo.e2el_ms < 0 || m.e2el * 1e3 <= slo.e2el_ms);
}

}  // namespace

json build_report(const RunResult& run, const ReportOptions& o) {
  std::vector<double> ttfts, tpots, itls, e2els;
  json input_lens = json::array(), output_lens = json::array(), ttft_list = json::array(),
       itl_list = json::array(), errors_list = json::array();
  std::map<std::string, long> errors, finish;
  long completed = 0, good = 0, mismatches = 0, without_usage = 0, merged = 0;
  uint64_t in_tokens = 0, out_tokens = 0, cached_tokens = 0;
  const bool has_slo = o.slo.ttft_ms >= 0 || o.slo.tpot_ms >= 0 || o.slo.e2el_ms >= 0;
  for (const RequestRecord& rec : run.records) {
    const CompletionResult& r = rec.result;
    errors_list.push_back(r.ok ? "" : r.error + ": " + r.error_message);
    if (!r.ok) {
      ++errors[r.error];
      continue;
    }
    ++completed;
    ++finish[r.finish_reason];
    if (!r.has_usage) ++without_usage;
    // The server's usage is the count; the streamed count checks it. Where chunks do not say how
    // many tokens they carry (REST without logprobs) a shortfall means text was held back and sent
    // with a later token: that request's ITL has one sample per chunk, not per token.
    if (r.has_usage && r.streamed_tokens != static_cast<int>(r.completion_tokens))
      ++(r.exact_token_events ? mismatches : merged);
    const RequestMetrics m = metrics_of(r);
    in_tokens += r.prompt_tokens;
    out_tokens += m.output_tokens;
    cached_tokens += r.cached_tokens;
    if (m.ttft >= 0) ttfts.push_back(m.ttft);
    if (m.output_tokens > 1) tpots.push_back(m.tpot);
    itls.insert(itls.end(), m.itl.begin(), m.itl.end());
    e2els.push_back(m.e2el);
    if (has_slo && meets(m, o.slo)) ++good;
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(m.output_tokens);
    ttft_list.push_back(m.ttft);
    itl_list.push_back(m.itl);
  }
  const double duration = run.duration_s();
  json j = o.metadata;
  j["duration"] = duration;
  j["completed"] = completed;
  j["failed"] = static_cast<long>(run.records.size()) - completed;
  j["errors_by_status"] = errors;
  j["finish_reasons"] = finish;
  j["total_input_tokens"] = in_tokens;
  j["total_output_tokens"] = out_tokens;
  j["total_cached_tokens"] = cached_tokens;
  j["request_throughput"] = duration > 0 ? completed / duration : 0.0;
  j["request_goodput"] = has_slo && duration > 0 ? json(good / duration) : json();
  j["output_throughput"] = duration > 0 ? out_tokens / duration : 0.0;
  j["total_token_throughput"] = duration > 0 ? (in_tokens + out_tokens) / duration : 0.0;
  add_stats(j, "ttft", ttfts, o);
  add_stats(j, "tpot", tpots, o);
  add_stats(j, "itl", itls, o);
  add_stats(j, "e2el", e2els, o);
  j["itl_samples"] = itls.size();
  j["token_count_mismatches"] = mismatches;
  j["requests_without_usage"] = without_usage;
  j["requests_with_merged_chunks"] = merged;
  if (o.detailed) {
    j["input_lens"] = input_lens;
    j["output_lens"] = output_lens;
    j["ttfts"] = ttft_list;
    j["itls"] = itl_list;
    j["errors"] = errors_list;
  }
  return j;
}

void print_report(const json& j, const ReportOptions& o, FILE* out) {
  auto line = [&](const char* label, const std::string& value) {
    std::fprintf(out, "%-40s %s\n", label, value.c_str());
  };
  auto num = [](const json& v, const char* fmt) {
    if (v.is_null()) return std::string("-");
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, v.get<double>());
    return std::string(buf);
  };
  std::fprintf(out, "%s\n",
               std::string(17, '=').append(" Serving Benchmark Result ").append(17, '=').c_str());
  line("Endpoint:", j.value("endpoint", ""));
  line("Successful requests:", std::to_string(j["completed"].get<long>()));
  line("Failed requests:", std::to_string(j["failed"].get<long>()));
  for (const auto& [kind, n] : j["errors_by_status"].items())
    line(("  " + kind + ":").c_str(), std::to_string(n.get<long>()));
  line("Benchmark duration (s):", num(j["duration"], "%.2f"));
  line("Total input tokens:", std::to_string(j["total_input_tokens"].get<uint64_t>()));
  line("  of which cached:", std::to_string(j["total_cached_tokens"].get<uint64_t>()));
  line("Total generated tokens:", std::to_string(j["total_output_tokens"].get<uint64_t>()));
  line("Request throughput (req/s):", num(j["request_throughput"], "%.2f"));
  if (!j["request_goodput"].is_null())
    line("Request goodput (req/s):", num(j["request_goodput"], "%.2f"));
  line("Output token throughput (tok/s):", num(j["output_throughput"], "%.2f"));
  line("Total token throughput (tok/s):", num(j["total_token_throughput"], "%.2f"));
  const char* titles[][2] = {{"ttft", "Time to First Token"},
                             {"tpot", "Time per Output Token (excl. 1st token)"},
                             {"itl", "Inter-token Latency"},
                             {"e2el", "End-to-end Latency"}};
  for (const auto& [key, title] : titles) {
    std::string head = std::string(" ") + title + " ";
    const size_t pad = head.size() < 60 ? (60 - head.size()) / 2 : 0;
    std::fprintf(out, "%s%s%s\n", std::string(pad, '-').c_str(), head.c_str(),
                 std::string(pad, '-').c_str());
    const std::string k = key;
    line(("Mean " + k + " (ms):").c_str(), num(j["mean_" + k + "_ms"], "%.3f"));
    line(("Median " + k + " (ms):").c_str(), num(j["median_" + k + "_ms"], "%.3f"));
    for (double p : o.percentiles) {
      std::string label = pct_name(p);
      label[0] = 'P';
      line((label + " " + k + " (ms):").c_str(), num(j[pct_name(p) + "_" + k + "_ms"], "%.3f"));
    }
  }
  std::fprintf(out, "%s\n", std::string(60, '=').c_str());
  if (j["token_count_mismatches"].get<long>() > 0)
    std::fprintf(
        out, "warning: %ld requests streamed a different number of tokens than their usage says\n",
        j["token_count_mismatches"].get<long>());
}

void write_csv(const RunResult& run, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << "index,issued_s,ok,error,finish_reason,prompt_tokens,completion_tokens,cached_tokens,ttft_"
         "ms,tpot_ms,"
         "e2el_ms,mean_itl_ms\n";
  size_t i = 0;
  for (const RequestRecord& rec : run.records) {
    const CompletionResult& r = rec.result;
    const RequestMetrics m = metrics_of(r);
    double itl_sum = 0;
    for (double x : m.itl) itl_sum += x;
    char row[512];
    std::snprintf(row, sizeof row, "%zu,%.6f,%d,%s,%s,%u,%u,%u,%.3f,%.3f,%.3f,%.3f\n", i++,
                  rec.issued_s, r.ok ? 1 : 0, r.error.c_str(), r.finish_reason.c_str(),
                  r.prompt_tokens, m.output_tokens, r.cached_tokens, m.ttft * 1e3, m.tpot * 1e3,
                  m.e2el * 1e3, m.itl.empty() ? 0.0 : itl_sum / m.itl.size() * 1e3);
    out << row;
  }
}

}  // namespace mixserve::client
