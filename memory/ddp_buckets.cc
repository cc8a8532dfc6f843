// memory/ddp_buckets.cc -- see memory/ddp_buckets.h (policy and sources there).
#include "memory/ddp_buckets.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "base/checked.h"
#include "memest/options.h"

namespace memest::memory {
namespace {

constexpr uint64_t kFirstBucketBytes = uint64_t{1} << 20;  // _DEFAULT_FIRST_BUCKET_BYTES

struct OpenBucket {
  int32_t dtype = 0;
  uint64_t bytes = 0;
  size_t first = 0;    // the index of its first tensor
  size_t tensors = 0;  // 0: empty
  size_t limit = 0;    // index into the limits
};

struct Bucket {
  uint64_t bytes = 0;
  size_t first = 0;  // the index of its first tensor
  size_t tensors = 0;
};

// compute_bucket_assignment_by_size's grouping (policy in the header), buckets in the order they
// close.
std::vector<Bucket> Assign(const std::vector<BucketedTensor>& tensors,
                           const std::vector<uint64_t>& limits) {
  std::vector<Bucket> out;
  if (limits.empty()) return out;
  std::vector<OpenBucket> open;  // one per dtype, in the order the dtypes first come
  for (size_t i = 0; i < tensors.size(); ++i) {
    const BucketedTensor& t = tensors[i];
    auto b = std::find_if(open.begin(), open.end(),
                          [&](const OpenBucket& o) { return o.dtype == t.dtype; });
    if (b == open.end()) b = open.insert(open.end(), OpenBucket{t.dtype});
    if (b->tensors++ == 0) b->first = i;
    b->bytes = base::SatAdd(b->bytes, t.bytes);
    if (b->bytes >= limits[b->limit]) {
      out.push_back({b->bytes, b->first, b->tensors});
      b->bytes = 0;
      b->tensors = 0;
      b->limit = std::min(b->limit + 1, limits.size() - 1);
    }
  }
  for (const OpenBucket& b : open) {
    if (b.tensors > 0) out.push_back({b.bytes, b.first, b.tensors});
  }
  return out;
}

}  // namespace

std::vector<uint64_t> AssignBuckets(const std::vector<BucketedTensor>& grads,
                                    const std::vector<uint64_t>& limits) {
  std::vector<uint64_t> out;
  for (const Bucket& b : Assign(grads, limits)) out.push_back(b.bytes);
  return out;
}

std::vector<uint64_t> BroadcastBuffers(const std::vector<BucketedTensor>& tensors, uint64_t limit) {
  std::vector<Bucket> buckets = Assign(tensors, {limit});
  std::stable_sort(buckets.begin(), buckets.end(),
                   [](const Bucket& a, const Bucket& b) { return a.first < b.first; });
  std::vector<uint64_t> out;
  for (const Bucket& b : buckets) out.push_back(b.tensors > 1 ? b.bytes : 0);
  return out;
}

DdpBuckets MakeDdpBuckets(std::vector<BucketedTensor> grads, double bucket_cap_mb) {
  DdpBuckets out;
  // Forward order: the order DDP is given the parameters in, near enough (module.parameters()).
  std::stable_sort(grads.begin(), grads.end(),
                   [](const auto& a, const auto& b) { return a.first_use < b.first_use; });
  out.at_wrap = AssignBuckets(grads, {std::numeric_limits<uint64_t>::max()});
  std::reverse(out.at_wrap.begin(), out.at_wrap.end());  // DDP hands the list over reversed
  // Ready order: the reverse of the forward order (ties reversed too).
  std::reverse(grads.begin(), grads.end());
  const double cap_bytes = bucket_cap_mb * 1048576.0;  // int(bucket_cap_mb * 1024 * 1024)
  const uint64_t cap = cap_bytes >= 1.8e19
                           ? std::numeric_limits<uint64_t>::max()
                           : std::max<uint64_t>(1, static_cast<uint64_t>(cap_bytes));
  const bool cap_given = bucket_cap_mb != Parallelism{}.bucket_cap_mb;
  out.rebuilt = AssignBuckets(grads, {cap_given ? cap : kFirstBucketBytes, cap});
  return out;
}

}  // namespace memest::memory
