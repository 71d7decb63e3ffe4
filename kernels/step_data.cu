#include <cstring>

#include "kernels/ops.cuh"
#include "kernels/step_data.cuh"

namespace mixserve::cuda {

StepData::StepData(float* pool, int32_t page_floats, const std::vector<StateLayout>& layouts,
                   std::vector<std::vector<int32_t>> padding_pages,
                   std::vector<int32_t> layer_blocks, bool verify)
    : pool_(pool), page_floats_(page_floats), padding_pages_(std::move(padding_pages)) {
  for (const StateLayout& l : layouts) token_base_.push_back(l.fixed_floats);
  meta_dev_.reserve(1 << 16);
  if (layer_blocks.empty()) return;
  std::vector<int32_t> padding;
  for (const std::vector<int32_t>& p : padding_pages_) {
    padding_offset_.push_back(static_cast<int64_t>(padding.size()));
    padding.insert(padding.end(), p.begin(), p.end());
  }
  tables_ = std::make_unique<BlockTables>(std::move(layer_blocks), 1, verify);
  padding_dev_.reserve(padding.size());
  CUDA_CHECK(cudaMemcpy(padding_dev_.get(), padding.data(), padding.size() * sizeof(int32_t),
                        cudaMemcpyHostToDevice));
}

bool StepData::upload(cudaStream_t stream, const ForwardBatch& b, const DeviceBatchLayout& at) {
  bool moved = false;
  pack_rows(b, at, meta_);
  if (tables_) {
    tables_->plan(b.states, slots_, writes_);
    if (table_dev_.reserve(tables_->entries())) {  // the slots grew: a new table, uploaded whole
      moved = true;
      CUDA_CHECK(cudaMemcpyAsync(table_dev_.get(), tables_->host_entries().data(),
                                 tables_->entries() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                 stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));  // from pageable memory the plan rewrites
    }
    pack_table_step(at, slots_, writes_, *tables_, meta_);
    writes_.clear();
  } else {
    pack_page_lists(b, at, padding_pages_, meta_);
  }
  if (meta_dev_.size() < meta_.size()) {
    moved = true;
    meta_dev_.reserve(meta_.size() * 2);
  }
  PinnedBuffer<int32_t>& host = meta_host_[uploads_++ % 2];
  host.reserve(meta_.size());
  std::memcpy(host.get(), meta_.data(), meta_.size() * sizeof(int32_t));
  CUDA_CHECK(cudaMemcpyAsync(meta_dev_.get(), host.get(), meta_.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
  return moved;
}

void StepData::apply_writes(cudaStream_t stream, const DeviceBatchLayout& at) const {
  if (tables_)
    apply_table_writes(stream, meta_dev_.get() + at.writes(), meta_dev_.get() + at.write_count(),
                       table_dev_.get());
}

DevBatch StepData::batch(const DeviceBatchLayout& at) const {
  const int32_t* m = meta_dev_.get();
  DevBatch b;
  b.n_seq = at.S;
  b.rows = at.R;
  b.tokens = m + at.tokens();
  b.row_seq = m + at.row_seq();
  b.row_pos = m + at.row_pos();
  b.row_start = m + at.row_start();
  b.pos0 = m + at.pos0();
  b.out_rows = m + at.out_rows();
  return b;
}

DevPages StepData::pages(const DeviceBatchLayout& at, int layer) const {
  DevPages pg;
  pg.pool = pool_;
  pg.page_floats = Divisor(page_floats_);
  pg.token_base = token_base_[layer];
  if (tables_) {
    pg.table = table_dev_.get() + tables_->layer_base(layer);
    pg.slot = meta_dev_.get() + at.slots();
    pg.slot_stride = tables_->slot_stride();
    pg.padding = padding_dev_.get() + padding_offset_[layer];
  } else {
    pg.start = meta_dev_.get() + at.page_starts(layer);
    pg.pages = meta_dev_.get() + at.pages(static_cast<int>(token_base_.size()));
  }
  return pg;
}

}  // namespace mixserve::cuda
