// api/pack.cc -- memest/pack.h (policy there).
#include "memest/pack.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

namespace memest {
namespace {

constexpr uint64_t kMaxLevel = uint64_t{1} << 62;  // sums stay far below 2^64

uint64_t Judged(const Estimate& e, const FitPolicy& policy) {
  return policy.on == FitOn::kUpper && e.device_high ? *e.device_high : e.peak_device;
}

Result<std::vector<PackedJob>> EstimateJobs(const Estimator& estimator,
                                            const std::vector<PackJob>& jobs, const GpuProfile& gpu,
                                            const FitPolicy& policy) {
  std::vector<PackedJob> out;
  out.reserve(jobs.size());
  for (const PackJob& job : jobs) {
    if (!job.model) return InvalidArgument("job '" + job.name + "' has no model");
    Options o = job.options;
    o.custom_gpu = std::make_shared<const GpuProfile>(gpu);
    o.gpu = gpu.name;
    Result<Estimate> e = estimator.Run(*job.model, o);
    if (!e.ok()) return e.status().WithContext("job '" + job.name + "'");
    out.push_back({job.name, std::min(Judged(*e, policy), kMaxLevel), std::move(e).value()});
  }
  return out;
}

// What jobs `members` need together on one GPU.
uint64_t Together(const std::vector<PackedJob>& jobs, const std::vector<size_t>& members,
                  GpuSharing sharing) {
  uint64_t total = 0, context = 0;
  for (size_t i : members) {
    total += jobs[i].judged;
    context = std::max(context, jobs[i].estimate.breakdown.cuda_context);
  }
  if (sharing == GpuSharing::kMps && members.size() > 1) {
    // One server context instead of one per client.
    uint64_t contexts = 0;
    for (size_t i : members) contexts += jobs[i].estimate.breakdown.cuda_context;
    total -= std::min(total, contexts - context);
  }
  return total;
}

uint64_t Margin(const GpuProfile& gpu, const FitPolicy& policy) {
  const uint64_t capacity = gpu.usable_memory.bytes;
  return static_cast<uint64_t>(policy.margin_fraction * static_cast<double>(capacity)) +
         policy.margin_bytes;
}

Placement Place(const std::vector<PackedJob>& jobs, uint64_t room, size_t gpus, bool best_fit,
                GpuSharing sharing) {
  Placement p;
  p.heuristic = best_fit ? "best-fit-decreasing" : "first-fit-decreasing";
  p.gpus.assign(gpus, {});
  p.used.assign(gpus, 0);
  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return jobs[a].judged > jobs[b].judged; });
  for (size_t j : order) {
    size_t chosen = gpus;
    uint64_t chosen_left = 0;
    for (size_t g = 0; g < gpus; ++g) {
      std::vector<size_t> with = p.gpus[g];
      with.push_back(j);
      const uint64_t need = Together(jobs, with, sharing);
      if (need > room) continue;
      const uint64_t left = room - need;
      if (chosen == gpus || (best_fit && left < chosen_left)) {
        chosen = g;
        chosen_left = left;
        if (!best_fit) break;
      }
    }
    if (chosen == gpus) {
      p.unplaced.push_back(j);
      continue;
    }
    p.gpus[chosen].push_back(j);
    p.used[chosen] = Together(jobs, p.gpus[chosen], sharing);
  }
  return p;
}

size_t GpusUsed(const Placement& p) {
  return static_cast<size_t>(
      std::count_if(p.gpus.begin(), p.gpus.end(), [](const auto& g) { return !g.empty(); }));
}

}  // namespace

Result<Colocation> CheckColocation(const Estimator& estimator, const std::vector<PackJob>& jobs,
                                   const GpuProfile& gpu, GpuSharing sharing,
                                   const FitPolicy& policy) {
  MEMEST_ASSIGN_OR_RETURN(std::vector<PackedJob> estimated,
                          EstimateJobs(estimator, jobs, gpu, policy));
  Colocation c;
  std::vector<size_t> all(estimated.size());
  std::iota(all.begin(), all.end(), 0);
  c.capacity = gpu.usable_memory.bytes;
  c.margin = Margin(gpu, policy);
  c.total = Together(estimated, all, sharing);
  c.headroom = static_cast<int64_t>(c.capacity) - static_cast<int64_t>(c.margin) -
               static_cast<int64_t>(c.total);
  c.fits = c.headroom >= 0;
  c.jobs = std::move(estimated);
  return c;
}

Result<Placement> PlaceJobs(const Estimator& estimator, const std::vector<PackJob>& jobs,
                            const GpuProfile& gpu, int64_t gpu_count, GpuSharing sharing,
                            const FitPolicy& policy) {
  if (gpu_count < 1 || gpu_count > (int64_t{1} << 20)) {
    return InvalidArgument("GPU count must be in [1, 1048576], got " + std::to_string(gpu_count));
  }
  MEMEST_ASSIGN_OR_RETURN(std::vector<PackedJob> estimated,
                          EstimateJobs(estimator, jobs, gpu, policy));
  const uint64_t capacity = gpu.usable_memory.bytes, margin = Margin(gpu, policy);
  const uint64_t room = capacity > margin ? capacity - margin : 0;
  const size_t gpus = static_cast<size_t>(gpu_count);
  Placement first = Place(estimated, room, gpus, /*best_fit=*/false, sharing);
  Placement best = Place(estimated, room, gpus, /*best_fit=*/true, sharing);
  const bool take_best =
      best.unplaced.size() < first.unplaced.size() ||
      (best.unplaced.size() == first.unplaced.size() && GpusUsed(best) < GpusUsed(first));
  Placement out = take_best ? std::move(best) : std::move(first);
  out.jobs = std::move(estimated);
  return out;
}

namespace {

nlohmann::ordered_json Head(const GpuProfile& gpu, GpuSharing sharing) {
  return {{"schema", "memest.pack/1"},
          {"gpu", gpu.name},
          {"capacity", gpu.usable_memory.bytes},
          {"sharing", sharing == GpuSharing::kMps ? "mps" : "processes"}};
}

std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string ColocationToJson(const Colocation& c, const GpuProfile& gpu, GpuSharing sharing) {
  nlohmann::ordered_json j = Head(gpu, sharing);
  nlohmann::ordered_json jobs = nlohmann::ordered_json::array();
  for (const PackedJob& job : c.jobs) jobs.push_back({{"name", job.name}, {"judged", job.judged}});
  j["jobs"] = jobs;
  j["total"] = c.total;
  j["margin"] = c.margin;
  j["headroom"] = c.headroom;
  j["fits"] = c.fits;
  return Dump(j);
}

std::string PlacementToJson(const Placement& p, const GpuProfile& gpu, GpuSharing sharing) {
  nlohmann::ordered_json j = Head(gpu, sharing);
  j["heuristic"] = p.heuristic;
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (size_t g = 0; g < p.gpus.size(); ++g) {
    if (p.gpus[g].empty()) continue;
    nlohmann::ordered_json names = nlohmann::ordered_json::array();
    for (size_t i : p.gpus[g]) names.push_back(p.jobs[i].name);
    gpus.push_back({{"gpu", g}, {"jobs", names}, {"used", p.used[g]}});
  }
  j["gpus"] = gpus;
  nlohmann::ordered_json unplaced = nlohmann::ordered_json::array();
  for (size_t i : p.unplaced) unplaced.push_back(p.jobs[i].name);
  j["unplaced"] = unplaced;
  j["fits"] = p.unplaced.empty();
  return Dump(j);
}

}  // namespace memest
