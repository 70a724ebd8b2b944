#include "server/metrics.h"

#include <cstdio>
#include <sstream>

namespace dsv4::server {

void HttpCounters::count(const std::string& route, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++counts_[{route, status}];
}

HttpCounters::Counts HttpCounters::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return counts_;
}

void HttpCounters::stream_started() {
  std::lock_guard<std::mutex> lk(mu_);
  ++active_;
}

void HttpCounters::stream_ended() {
  std::lock_guard<std::mutex> lk(mu_);
  --active_;
}

int64_t HttpCounters::active_streams() const {
  std::lock_guard<std::mutex> lk(mu_);
  return active_;
}

namespace {

// A label value with backslash, double quote and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class Writer {
 public:
  explicit Writer(std::string labels) : labels_(std::move(labels)) {}

  void head(const std::string& name, const char* type, const char* help) {
    os_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void sample(const std::string& name, double v, const std::string& extra = "") {
    os_ << name << '{' << labels_ << (extra.empty() ? "" : ",") << extra << "} " << num(v) << '\n';
  }
  void counter(const std::string& name, const char* help, double v) {
    head(name, "counter", help);
    sample(name, v);
  }
  void gauge(const std::string& name, const char* help, double v) {
    head(name, "gauge", help);
    sample(name, v);
  }
  void histogram(const std::string& name, const char* help, const Histogram& h) {
    head(name, "histogram", help);
    for (size_t i = 0; i < h.bounds().size(); ++i)
      sample(name + "_bucket", double(h.counts()[i]), "le=\"" + num(h.bounds()[i]) + "\"");
    sample(name + "_bucket", double(h.count()), "le=\"+Inf\"");
    sample(name + "_sum", h.sum());
    sample(name + "_count", double(h.count()));
  }
  std::string str() const { return os_.str(); }

 private:
  std::string labels_;
  std::ostringstream os_;
};

}  // namespace

std::string render_metrics(const EngineStats& s, const HttpCounters::Counts& http, int64_t active_streams,
                           const std::string& model_name) {
  Writer w("model=\"" + label(model_name) + "\"");
  w.head("dsv4_http_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, n] : http)
    w.sample("dsv4_http_requests_total", double(n),
             "route=\"" + label(key.first) + "\",status=\"" + std::to_string(key.second) + "\"");
  w.gauge("dsv4_http_active_streams", "Responses being produced now.", double(active_streams));

  w.counter("dsv4_requests_submitted_total", "Generation requests accepted by the engine.", double(s.requests_submitted));
  w.counter("dsv4_requests_rejected_total", "Generation requests refused (queue full, invalid, shutting down).",
            double(s.requests_rejected));
  w.head("dsv4_requests_finished_total", "counter", "Generation requests finished, by finish reason.");
  w.sample("dsv4_requests_finished_total", double(s.finished_stop), "reason=\"stop\"");
  w.sample("dsv4_requests_finished_total", double(s.finished_length), "reason=\"length\"");
  w.counter("dsv4_requests_cancelled_total", "Generation requests cancelled (client gone, shutdown).",
            double(s.requests_cancelled));
  w.counter("dsv4_prompt_tokens_total", "Prompt tokens prefilled.", double(s.prompt_tokens));
  w.counter("dsv4_generation_tokens_total", "Tokens generated.", double(s.generated_tokens));
  w.counter("dsv4_steps_total", "Engine steps run.", double(s.steps));

  w.gauge("dsv4_queue_length", "Requests waiting for admission.", double(s.queued));
  w.gauge("dsv4_running_sequences", "Sequences being generated.", double(s.running));
  w.gauge("dsv4_max_num_seqs", "Most sequences run at once.", double(s.max_num_seqs));
  w.gauge("dsv4_batch_size", "Sequences in the last step.", double(s.last_step_sequences));
  w.gauge("dsv4_step_tokens", "Tokens (prefill + decode) in the last step.", double(s.last_step_tokens));
  const double page = double(s.cache_page_tokens);
  w.gauge("dsv4_cache_tokens_used", "Cache tokens reserved by running sequences.", double(s.cache_pages_used) * page);
  w.gauge("dsv4_cache_tokens_total", "Cache tokens in the pool.", double(s.cache_pages_total) * page);
  w.gauge("dsv4_cache_usage_ratio", "Fraction of the cache pool reserved.",
          s.cache_pages_total > 0 ? double(s.cache_pages_used) / double(s.cache_pages_total) : 0.0);

  // The prefix cache (docs/server.md "Prefix cache"); all zero with --no-prefix-cache.
  const PrefixCacheStats& pc = s.prefix;
  w.gauge("dsv4_prefix_cache_enabled", "1 when the prefix cache is on.", s.prefix_cache ? 1 : 0);
  w.counter("dsv4_prefix_cache_lookups_total", "Prompts looked up in the prefix cache.", double(pc.lookups));
  w.counter("dsv4_prefix_cache_hits_total", "Lookups that found a cached prefix.", double(pc.hits));
  w.counter("dsv4_prefix_cache_hit_tokens_total", "Prompt tokens restored from the prefix cache.", double(pc.hit_tokens));
  w.counter("dsv4_prefix_cache_miss_tokens_total", "Prompt tokens of looked-up prompts computed (not cached).",
            double(pc.miss_tokens));
  w.counter("dsv4_prefix_cache_inserts_total", "Slot snapshots added to the prefix cache.", double(pc.inserts));
  w.counter("dsv4_prefix_cache_evictions_total", "Prefix cache entries dropped for the budget.", double(pc.evictions));
  w.counter("dsv4_prefix_cache_snapshot_errors_total", "Snapshots that failed (the request went on uncached).",
            double(s.prefix_snapshot_errors));
  w.gauge("dsv4_prefix_cache_bytes", "Bytes the prefix cache holds.", double(pc.bytes));
  w.gauge("dsv4_prefix_cache_entries", "Entries the prefix cache holds.", double(pc.entries));
  w.gauge("dsv4_prefix_cache_budget_bytes", "The prefix cache's budget in bytes.", double(pc.budget_bytes));
  // Speculative decoding (docs/speculative.md "In the engine"); all zero without --speculative.
  w.gauge("dsv4_spec_drafts_per_step", "Drafts per verify step (serve --speculative k; 0: off).", double(s.speculative));
  w.counter("dsv4_spec_verify_steps_total", "Speculative verify steps (rounds with drafts).", double(s.spec_verify_steps));
  w.counter("dsv4_spec_draft_tokens_total", "Draft tokens proposed by the MTP block.", double(s.spec_draft_tokens));
  w.counter("dsv4_spec_accepted_tokens_total", "Draft tokens accepted by the verify.", double(s.spec_accepted_tokens));
  w.counter("dsv4_spec_tokens_total", "Tokens emitted by verify steps (accepted drafts and one more each).",
            double(s.spec_tokens));
  w.counter("dsv4_spec_plain_steps_total", "Steps of speculative sequences without a draft (limit, context).",
            double(s.spec_plain_steps));
  w.gauge("dsv4_spec_acceptance_rate", "Accepted / proposed draft tokens since start.", s.spec_acceptance());

  w.histogram("dsv4_time_to_first_token_seconds", "Time from arrival to the first generated token.", s.ttft);
  w.histogram("dsv4_inter_token_latency_seconds", "Time between consecutive tokens of a request.", s.inter_token);
  w.histogram("dsv4_request_latency_seconds", "Time from arrival to the end of generation.", s.request_latency);
  w.histogram("dsv4_batch_size_sequences", "Sequences per engine step.", s.batch_size);
  return w.str();
}

}  // namespace dsv4::server
