#include "cc/gcsio/range_reader.h"

#include <stdexcept>
#include <utility>

namespace gcsio {
namespace {

DriverOptions ReaderDriverOptions(const RangeReaderOptions& o) {
  o.Validate();
  return DriverOptions{
      "RangeReader",        "reader",          o.num_threads, o.max_inflight_requests,
      o.max_inflight_bytes, o.stall_timeout_s, o.retry};
}

}  // namespace

void RangeReaderOptions::Validate() const {
  if (max_inflight_requests < 1) throw std::invalid_argument("max_inflight_requests must be >= 1");
  if (max_inflight_bytes < 1) throw std::invalid_argument("max_inflight_bytes must be >= 1");
  if (num_threads < 1) throw std::invalid_argument("num_threads must be >= 1");
  if (plan.chunk_bytes < 1) throw std::invalid_argument("chunk_bytes must be >= 1");
  if (plan.min_chunk_bytes < 1) throw std::invalid_argument("min_chunk_bytes must be >= 1");
  if (!(connect_timeout_s > 0)) throw std::invalid_argument("connect_timeout_s must be > 0");
  if (!(stall_timeout_s > 0)) throw std::invalid_argument("stall_timeout_s must be > 0");
  if (recv_buffer_bytes < 1024) throw std::invalid_argument("recv_buffer_bytes must be >= 1024");
  retry.Validate();
}

RangeReader::RangeReader(RangeReaderOptions options, TokenSource token_source)
    : options_(std::move(options)),
      driver_(ReaderDriverOptions(options_), std::move(token_source)),
      kind_(RangeKindOptions{options_.endpoint, options_.connect_timeout_s,
                             options_.recv_buffer_bytes, options_.credential_description},
            &driver_.stats()) {}

RangeReader::~RangeReader() { driver_.Stop(); }

std::shared_ptr<Batch> RangeReader::Submit(std::vector<ObjectRef> objects,
                                           std::vector<RangeSpec> ranges,
                                           std::vector<uint8_t*> dests) {
  driver_.CheckProcess();
  std::vector<const BlockSums*> sums(objects.size(), nullptr);
  for (size_t i = 0; i < objects.size(); ++i) sums[i] = objects[i].sums.get();
  Plan plan = PlanFetches(ranges, options_.plan, sums);
  driver_.RefreshToken();
  auto batch = std::make_shared<Batch>(std::move(objects), std::move(ranges), std::move(dests),
                                       std::move(plan));
  driver_.Submit(kind_.Jobs(batch));
  return batch;
}

void RangeReader::Cancel(const std::shared_ptr<Batch>& batch) {
  batch->MarkCancelled();
  if (!driver_.Cancel(batch.get())) return;  // fork() child: no loop here will ever finish it
  batch->WaitFinished();
}

}  // namespace gcsio
