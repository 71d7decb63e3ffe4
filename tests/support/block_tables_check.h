// A backend that plans device block tables (engine/block_tables.h, verify on) for every forward
// pass the engine gives the backend it wraps, and checks that the planned table holds every
// sequence's pages: the engine's real flows (admission, growth, prefix-cache copies, swapping and
// recompute preemption, sessions, reused SequenceState objects) tested against the plan's
// append-only fast path without a GPU (tests/engine/test_scheduler.cc).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/block_tables.h"

namespace mixserve::testing {

class BlockTablesCheck : public Backend {
 public:
  explicit BlockTablesCheck(std::unique_ptr<Backend> inner)
      : inner_(std::move(inner)),
        tables_(std::make_unique<BlockTables>(
            most_pages_per_layer(inner_->state_layouts(), inner_->page_floats(),
                                 inner_->config().max_seq_len),
            1, true)) {}
  std::string name() const override { return inner_->name(); }
  const ModelConfig& config() const override { return inner_->config(); }
  const std::vector<StateLayout>& state_layouts() const override { return inner_->state_layouts(); }
  int32_t page_floats() const override { return inner_->page_floats(); }
  int32_t total_pages() const override { return inner_->total_pages(); }
  void forward(const ForwardBatch& b, std::vector<float>& logits) override {
    check(b);
    inner_->forward(b, logits);
  }
  void forward_and_sample(const ForwardBatch& b, const std::vector<SampleRow>& rows,
                          std::vector<SampledToken>& tokens, double* sample_seconds) override {
    check(b);
    inner_->forward_and_sample(b, rows, tokens, sample_seconds);
  }
  void logits_row(int32_t row, float* host) const override { inner_->logits_row(row, host); }
  void init_state(int layer, const std::vector<int32_t>& pages) override {
    inner_->init_state(layer, pages);
  }
  void read_pages(const std::vector<int32_t>& pages, float* host) const override {
    inner_->read_pages(pages, host);
  }
  void write_pages(const std::vector<int32_t>& pages, const float* host) override {
    inner_->write_pages(pages, host);
  }
  void copy_pages(const std::vector<int32_t>& from, const std::vector<int32_t>& to) override {
    inner_->copy_pages(from, to);
  }
  const std::vector<double>& mixer_seconds() const override { return inner_->mixer_seconds(); }

  uint64_t writes() const { return writes_; }    // entries the plans sent
  uint64_t entries() const { return entries_; }  // entries the batches held

 private:
  void check(const ForwardBatch& b) {
    std::vector<int32_t> slots;
    std::vector<BlockWrite> writes;
    tables_->plan(b.states, slots, writes);  // throws where a generation's promise was broken
    writes_ += writes.size();
    for (size_t i = 0; i < b.states.size(); ++i)
      for (size_t l = 0; l < b.states[i]->layer_pages.size(); ++l) {
        const std::vector<int32_t>& pages = b.states[i]->layer_pages[l];
        entries_ += pages.size();
        for (size_t k = 0; k < pages.size(); ++k)
          if (tables_->entry(slots[i], static_cast<int>(l), static_cast<int>(k)) != pages[k])
            throw std::logic_error("block table: sequence " + std::to_string(i) + " layer " +
                                   std::to_string(l) + " block " + std::to_string(k) +
                                   " holds another page");
      }
  }
  std::unique_ptr<Backend> inner_;
  std::unique_ptr<BlockTables> tables_;
  uint64_t writes_ = 0, entries_ = 0;
};

}  // namespace mixserve::testing
