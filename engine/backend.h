// The interface between the engine (scheduler, sampler) and a compute backend (CPU, CUDA).
// A forward pass is plain arrays — tokens, sequence boundaries, positions — plus, per sequence,
// its SequenceState: the page lists the pool gave each layer. Those lists persist between
// steps (the scheduler never copies them), so a step costs the host O(sequences), not O(pages);
// a GPU backend keeps a device copy of each page table and refreshes only what changed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/sampler.h"
#include "engine/state_layout.h"

namespace mixserve {
struct SequenceState;
}

namespace mixserve {

struct ForwardBatch {
  std::vector<int32_t> tokens;               // every row, sequence after sequence
  std::vector<int32_t> row_start;            // [n_seq + 1] offsets into tokens
  std::vector<int32_t> pos0;                 // [n_seq] position of each sequence's first row
  std::vector<const SequenceState*> states;  // [n_seq] whose pages cover pos0 + rows
  bool all_logits = false;  // logits for every row, not only each sequence's last row

  int n_seq() const { return static_cast<int>(pos0.size()); }
  // A decode row whose token is not on the host yet: the one the previous
  // Backend::launch_and_sample sampled for its sample row `sample_row` (overlapped steps).
  static constexpr int32_t sampled_token(int32_t sample_row) { return -1 - sample_row; }
  // Inline: the engine calls it for every running request on every step.
  void add_sequence(const int32_t* toks, int n, int pos, const SequenceState& state) {
    if (row_start.empty()) row_start.push_back(0);
    if (n == 1)
      tokens.push_back(*toks);  // a decode row: the common case, no block copy
    else
      tokens.insert(tokens.end(), toks, toks + n);
    row_start.push_back(static_cast<int32_t>(tokens.size()));
    pos0.push_back(pos);
    states.push_back(&state);
  }
  void clear() {
    tokens.clear();
    row_start.clear();
    pos0.clear();
    states.clear();
  }
};

// One row whose next token the engine needs: which logits row of the forward pass (the sequence
// index, or the row when all_logits), how to sample it, and the RNG counter (the token's index).
struct SampleRow {
  int32_t row = 0;
  const SamplingParams* params = nullptr;
  const TokenHistory* history = nullptr;  // penalties' token counts (empty when untracked)
  uint64_t step = 0;
  bool want_logprob = false;  // the token's logprob even when params->logprobs == 0
  // Overlapped steps: the batch row fed the token on its way from the launch before (its
  // sequence's last row), which `history` does not count yet and the penalties must; −1: none.
  int32_t pending_row = -1;
};

// Refuses (std::out_of_range, naming `what`) a row whose pending_row is outside a batch of
// `batch_rows` rows — before the pass runs, which would change the states.
void check_pending_rows(const std::vector<SampleRow>& rows, size_t batch_rows, const char* what);

// What an overlapped step gives back (Backend::collect_sampled): a token for each row it sampled,
// and the logits rows it was asked to keep (the prefix cache's snapshot of a prompt's last row),
// vocab_size floats each, in the order asked.
struct SampledStep {
  std::vector<SampledToken> tokens;
  std::vector<float> kept_logits;
  double sample_seconds = 0;  // the sampling's share, where the backend measures it
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& config() const = 0;
  // State layout of every layer (mixer + FFN), which fixes how many floats each state needs.
  virtual const std::vector<StateLayout>& state_layouts() const = 0;
  virtual int32_t page_floats() const = 0;
  virtual int32_t total_pages() const = 0;

  // Runs the model over the batch, updating every sequence's state; logits gets
  // [n_seq or rows, vocab_size] floats.
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;

  // Runs the model over the batch and samples the listed rows: tokens[i] for rows[i], the same
  // token sample_token() (engine/sampler.h) gives on that row's logits. The default runs
  // forward() into host memory and samples there; a device backend may sample where the logits
  // are and bring back only the tokens. sample_seconds (when set) gets the sampling's share.
  virtual void forward_and_sample(const ForwardBatch& batch, const std::vector<SampleRow>& rows,
                                  std::vector<SampledToken>& tokens,
                                  double* sample_seconds = nullptr);
  // Logits row `row` of the last forward_and_sample (vocab_size floats), fetched on demand: the
  // engine needs a prompt's last row on the host only for a prefix-cache snapshot.
  virtual void logits_row(int32_t row, float* host) const;

  // Overlapped steps (EngineOptions::overlap_steps): launch_and_sample queues what
  // forward_and_sample does and may return before it has run; collect_sampled waits for the
  // oldest launch not yet collected and gives its tokens, and the logits rows `keep_logits` named
  // (a later launch overwrites the logits, so logits_row cannot fetch them then). A row of the
  // batch may be ForwardBatch::sampled_token(j): the token the previous launch sampled for its row
  // j, which a device backend reads where its sampler wrote it, so the engine can queue step N + 1
  // before step N's tokens reach the host. Every other call (state pages, logits_row, forward)
  // acts after the launches before it, as on one CUDA stream. The default runs each launch at once
  // (the CPU backend's: it has no host work to hide); a device backend overrides both.
  virtual void launch_and_sample(const ForwardBatch& batch, const std::vector<SampleRow>& rows,
                                 const std::vector<int32_t>& keep_logits = {});
  virtual void collect_sampled(SampledStep& step);
  // Whether launch_and_sample returns before the pass has run (a device backend that overlaps).
  virtual bool overlaps() const { return false; }

  // Writes the initial state (zeros, or the running-max sentinel) of layer `layer` into pages.
  virtual void init_state(int layer, const std::vector<int32_t>& pages) = 0;
  // Page contents to and from host memory (snapshots, swapping, tests) and page to page copies.
  virtual void read_pages(const std::vector<int32_t>& pages, float* host) const = 0;
  virtual void write_pages(const std::vector<int32_t>& pages, const float* host) = 0;
  virtual void copy_pages(const std::vector<int32_t>& from, const std::vector<int32_t>& to) = 0;
  // Seconds each layer's mixer took in the last forward pass (empty when not measured).
  virtual const std::vector<double>& mixer_seconds() const { return no_timing_; }

 protected:
  // Calls fn(begin, end) over chunks of [0, n) of at least `grain`; a backend with threads runs
  // them in parallel. The default forward_and_sample spreads its rows this way: each row's token
  // depends on that row alone, so any split gives the same tokens.
  virtual void parallel_rows(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
    (void)grain;
    fn(0, n);
  }

 private:
  std::vector<double> no_timing_;
  std::vector<float> sample_logits_;  // the default forward_and_sample's host logits
  // The default launch_and_sample's results, oldest first, and the last launch's tokens (what a
  // sampled_token row reads).
  std::vector<SampledStep> launched_;
  std::vector<int32_t> last_sampled_;
  ForwardBatch resolved_;
};

}  // namespace mixserve
