#include "learned/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <set>

namespace memest::learned {
namespace {

struct Adam {
  Eigen::MatrixXd m, s;
  void Init(Eigen::Index rows, Eigen::Index cols) {
    m = Eigen::MatrixXd::Zero(rows, cols);
    s = Eigen::MatrixXd::Zero(rows, cols);
  }
  // One Adam step (Kingma & Ba, beta1 0.9, beta2 0.999, eps 1e-8) of `param` along `grad`.
  template <typename P, typename G>
  void Step(P& param, const G& grad, double lr, int t) {
    constexpr double kB1 = 0.9, kB2 = 0.999, kEps = 1e-8;
    m = kB1 * m + (1.0 - kB1) * grad;
    s = kB2 * s + (1.0 - kB2) * grad.cwiseProduct(grad);
    const double c1 = 1.0 - std::pow(kB1, t), c2 = 1.0 - std::pow(kB2, t);
    param.array() -= lr * (m.array() / c1) / ((s.array() / c2).sqrt() + kEps);
  }
};

// Keeps the monotone constraints: v >= 0, W[:, i] >= 0 and u[i] >= 0 for monotone i.
void Project(const std::vector<bool>& monotone, Member* m) {
  m->v = m->v.cwiseMax(0.0);
  for (size_t i = 0; i < monotone.size(); ++i) {
    if (!monotone[i]) continue;
    const auto col = static_cast<Eigen::Index>(i);
    m->w.col(col) = m->w.col(col).cwiseMax(0.0);
    m->u(col) = std::max(m->u(col), 0.0);
  }
}

// Standardized outputs of `m` for the rows of `z` (batch forward, Eigen).
Eigen::VectorXd Forward(const Member& m, const Eigen::MatrixXd& z, Eigen::MatrixXd* act) {
  *act = ((z * m.w.transpose()).rowwise() + m.b.transpose()).array().tanh().matrix();
  return ((*act * m.v + z * m.u).array() + m.c).matrix();
}

double Mse(const Member& m, const Eigen::MatrixXd& z, const Eigen::VectorXd& y) {
  if (z.rows() == 0) return 0.0;
  Eigen::MatrixXd act;
  const Eigen::VectorXd err = Forward(m, z, &act) - y;
  return err.squaredNorm() / static_cast<double>(z.rows());
}

Eigen::MatrixXd Rows(const Eigen::MatrixXd& x, const std::vector<int>& rows) {
  Eigen::MatrixXd out(static_cast<Eigen::Index>(rows.size()), x.cols());
  for (size_t r = 0; r < rows.size(); ++r) out.row(static_cast<Eigen::Index>(r)) = x.row(rows[r]);
  return out;
}

Eigen::VectorXd Rows(const Eigen::VectorXd& y, const std::vector<int>& rows) {
  Eigen::VectorXd out(static_cast<Eigen::Index>(rows.size()));
  for (size_t r = 0; r < rows.size(); ++r) out(static_cast<Eigen::Index>(r)) = y(rows[r]);
  return out;
}

Member TrainMember(const Eigen::MatrixXd& z, const Eigen::VectorXd& y, const MemberSplit& split,
                   const std::vector<bool>& monotone, const TrainConfig& config, uint64_t seed) {
  const Eigen::Index f = z.cols();
  const Eigen::Index h = config.hidden;
  Rng rng(seed);
  Member m;
  m.seed = seed;
  // Glorot-uniform init; monotone columns and v start non-negative.
  const double rw = std::sqrt(6.0 / static_cast<double>(f + h));
  const double rv = std::sqrt(6.0 / static_cast<double>(h + 1));
  m.w.resize(h, f);
  for (Eigen::Index j = 0; j < h; ++j) {
    for (Eigen::Index i = 0; i < f; ++i) m.w(j, i) = rng.Uniform(-rw, rw);
  }
  m.b = Eigen::VectorXd::Zero(h);
  m.v.resize(h);
  for (Eigen::Index j = 0; j < h; ++j) m.v(j) = rng.Uniform(0.0, rv);
  m.u = Eigen::VectorXd::Zero(f);
  m.c = 0.0;
  for (size_t i = 0; i < monotone.size(); ++i) {
    const auto col = static_cast<Eigen::Index>(i);
    if (monotone[i]) m.w.col(col) = m.w.col(col).cwiseAbs();
  }

  const Eigen::MatrixXd zv = Rows(z, split.validation);
  const Eigen::VectorXd yv = Rows(y, split.validation);
  Adam aw, ab, av, au, ac;
  aw.Init(h, f);
  ab.Init(h, 1);
  av.Init(h, 1);
  au.Init(f, 1);
  ac.Init(1, 1);
  std::vector<int> order = split.train;
  Member best = m;
  best.validation_loss = Mse(m, zv, yv);
  int since_best = 0, t = 0;
  const size_t bs = static_cast<size_t>(std::max(config.batch_size, 1));
  for (int epoch = 1; epoch <= config.max_epochs; ++epoch) {
    rng.Shuffle(&order);
    for (size_t start = 0; start < order.size(); start += bs) {
      const size_t end = std::min(order.size(), start + bs);
      const std::vector<int> batch(order.begin() + static_cast<std::ptrdiff_t>(start),
                                   order.begin() + static_cast<std::ptrdiff_t>(end));
      const Eigen::MatrixXd zb = Rows(z, batch);
      const Eigen::VectorXd yb = Rows(y, batch);
      Eigen::MatrixXd act;
      const Eigen::VectorXd err = Forward(m, zb, &act) - yb;
      const Eigen::VectorXd dout = err * (2.0 / static_cast<double>(batch.size()));
      const Eigen::MatrixXd dpre =
          ((dout * m.v.transpose()).array() * (1.0 - act.array().square())).matrix();
      const Eigen::MatrixXd gw = dpre.transpose() * zb + config.weight_decay * m.w;
      const Eigen::VectorXd gb = dpre.colwise().sum().transpose();
      const Eigen::VectorXd gv = act.transpose() * dout + config.weight_decay * m.v;
      const Eigen::VectorXd gu = zb.transpose() * dout + config.weight_decay * m.u;
      Eigen::MatrixXd gc(1, 1);
      gc(0, 0) = dout.sum();
      ++t;
      aw.Step(m.w, gw, config.learning_rate, t);
      ab.Step(m.b, gb, config.learning_rate, t);
      av.Step(m.v, gv, config.learning_rate, t);
      au.Step(m.u, gu, config.learning_rate, t);
      Eigen::MatrixXd c(1, 1);
      c(0, 0) = m.c;
      ac.Step(c, gc, config.learning_rate, t);
      m.c = c(0, 0);
      Project(monotone, &m);
    }
    m.epochs = epoch;
    const double val = Mse(m, zv, yv);
    if (val < best.validation_loss) {
      best = m;
      best.best_epoch = epoch;
      best.validation_loss = val;
      since_best = 0;
    } else if (++since_best >= config.patience) {
      break;
    }
  }
  best.epochs = m.epochs;
  best.train_loss = Mse(best, Rows(z, split.train), Rows(y, split.train));
  return best;
}

nlohmann::json VectorJson(const Eigen::VectorXd& v) {
  nlohmann::json a = nlohmann::json::array();
  for (Eigen::Index i = 0; i < v.size(); ++i) a.push_back(v(i));
  return a;
}

nlohmann::json MatrixJson(const Eigen::MatrixXd& m) {
  nlohmann::json a = nlohmann::json::array();
  for (Eigen::Index r = 0; r < m.rows(); ++r) a.push_back(VectorJson(m.row(r).transpose()));
  return a;
}

Result<double> NumberFrom(const nlohmann::json& j, const std::string& what) {
  if (!j.is_number()) return InvalidArgument("learned weights: " + what + " is not a number");
  const double d = j.get<double>();
  if (!std::isfinite(d)) return InvalidArgument("learned weights: " + what + " is not finite");
  return d;
}

Result<Eigen::VectorXd> VectorFrom(const nlohmann::json& j, const std::string& what, size_t size) {
  if (!j.is_array() || j.size() != size) {
    return InvalidArgument("learned weights: " + what + " must be an array of " +
                           std::to_string(size) + " numbers");
  }
  Eigen::VectorXd v(static_cast<Eigen::Index>(size));
  for (size_t i = 0; i < size; ++i) {
    MEMEST_ASSIGN_OR_RETURN(v(static_cast<Eigen::Index>(i)), NumberFrom(j[i], what));
  }
  return v;
}

}  // namespace

uint64_t Rng::Next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

uint64_t Rng::Below(uint64_t n) {
  if (n <= 1) return 0;
  // Largest multiple of n that fits; values at or above it are rejected.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x = Next();
  while (x >= limit) x = Next();
  return x % n;
}

double Network::PredictMember(size_t m, std::span<const double> x) const {
  const Member& mem = members[m];
  const size_t f = feature_names.size();
  std::vector<double> z(f);
  for (size_t i = 0; i < f; ++i) {
    const auto k = static_cast<Eigen::Index>(i);
    z[i] = scale(k) == 0.0 ? 0.0 : (x[i] - mean(k)) * scale(k);
  }
  double out = mem.c;
  for (Eigen::Index j = 0; j < mem.w.rows(); ++j) {
    double s = mem.b(j);
    for (size_t i = 0; i < f; ++i) s += mem.w(j, static_cast<Eigen::Index>(i)) * z[i];
    out += mem.v(j) * std::tanh(s);
  }
  for (size_t i = 0; i < f; ++i) out += mem.u(static_cast<Eigen::Index>(i)) * z[i];
  return y_mean + y_scale * out;
}

std::vector<double> Network::Predict(std::span<const double> x) const {
  std::vector<double> out;
  out.reserve(members.size());
  for (size_t m = 0; m < members.size(); ++m) out.push_back(PredictMember(m, x));
  return out;
}

std::vector<MemberSplit> GroupMemberSplits(const std::vector<int>& rows,
                                           const std::function<const std::string&(int)>& group_of,
                                           const std::vector<std::string>& groups,
                                           size_t validation_groups, int members, uint64_t seed) {
  std::vector<MemberSplit> splits;
  for (int m = 0; m < members; ++m) {
    Rng rng(seed * 7919ULL + static_cast<uint64_t>(m));
    std::vector<std::string> order = groups;
    rng.Shuffle(&order);
    const size_t k = std::min(validation_groups, order.size());
    const std::set<std::string> val(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
    MemberSplit split;
    for (int i : rows) (val.count(group_of(i)) ? split.validation : split.train).push_back(i);
    splits.push_back(std::move(split));
  }
  return splits;
}

Result<Network> Train(const Dataset& data, const std::vector<MemberSplit>& splits,
                      const std::vector<int>& normalize_rows,
                      const std::vector<std::string>& feature_names,
                      const std::vector<bool>& monotone, const TrainConfig& config) {
  const Eigen::Index n = data.x.rows(), f = data.x.cols();
  if (data.y.size() != n) return InvalidArgument("train: x and y have different row counts");
  if (static_cast<size_t>(f) != feature_names.size() || monotone.size() != feature_names.size()) {
    return InvalidArgument("train: feature names/monotone flags do not match the columns");
  }
  if (splits.empty() || normalize_rows.empty()) return InvalidArgument("train: no rows");
  if (config.hidden < 1) return InvalidArgument("train: hidden must be >= 1");
  if (!data.x.allFinite() || !data.y.allFinite()) return InvalidArgument("train: non-finite data");
  for (const MemberSplit& s : splits) {
    if (s.train.empty()) return InvalidArgument("train: a member has no training rows");
    for (const std::vector<int>* rows : {&s.train, &s.validation}) {
      for (int r : *rows) {
        if (r < 0 || r >= n) return InvalidArgument("train: row index out of range");
      }
    }
  }
  Network net;
  net.feature_names = feature_names;
  net.monotone = monotone;
  // Normalization: mean and 1/std (population) over normalize_rows; 0 for constant features.
  const Eigen::MatrixXd xn = Rows(data.x, normalize_rows);
  const Eigen::VectorXd yn = Rows(data.y, normalize_rows);
  const double count = static_cast<double>(normalize_rows.size());
  net.mean = xn.colwise().mean().transpose();
  net.scale.resize(f);
  for (Eigen::Index i = 0; i < f; ++i) {
    const double var = (xn.col(i).array() - net.mean(i)).square().sum() / count;
    net.scale(i) = var > 1e-18 ? 1.0 / std::sqrt(var) : 0.0;
  }
  net.y_mean = yn.mean();
  const double yvar = (yn.array() - net.y_mean).square().sum() / count;
  net.y_scale = yvar > 1e-18 ? std::sqrt(yvar) : 1.0;
  net.feature_min.resize(static_cast<size_t>(f));
  net.feature_max.resize(static_cast<size_t>(f));
  for (Eigen::Index i = 0; i < f; ++i) {
    net.feature_min[static_cast<size_t>(i)] = xn.col(i).minCoeff();
    net.feature_max[static_cast<size_t>(i)] = xn.col(i).maxCoeff();
  }

  // Standardized data (a constant feature becomes 0).
  Eigen::MatrixXd z(n, f);
  for (Eigen::Index i = 0; i < f; ++i) {
    if (net.scale(i) == 0.0) {
      z.col(i).setZero();
    } else {
      z.col(i) = ((data.x.col(i).array() - net.mean(i)) * net.scale(i)).matrix();
    }
  }
  const Eigen::VectorXd ys = (data.y.array() - net.y_mean) / net.y_scale;
  for (size_t m = 0; m < splits.size(); ++m) {
    net.members.push_back(
        TrainMember(z, ys, splits[m], monotone, config, config.seed * 1000003ULL + m));
  }
  return net;
}

double MeanSquaredError(const Network& net, size_t m, const Dataset& data,
                        const std::vector<int>& rows) {
  if (rows.empty()) return 0.0;
  double sum = 0.0;
  std::vector<double> x(static_cast<size_t>(data.x.cols()));
  for (int r : rows) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = data.x(r, static_cast<Eigen::Index>(i));
    const double e = net.PredictMember(m, x) - data.y(r);
    sum += e * e;
  }
  return sum / static_cast<double>(rows.size());
}

nlohmann::json ToJson(const Network& net) {
  nlohmann::json features = nlohmann::json::array();
  for (size_t i = 0; i < net.feature_names.size(); ++i) {
    const auto k = static_cast<Eigen::Index>(i);
    features.push_back({{"name", net.feature_names[i]},
                        {"monotone", static_cast<bool>(net.monotone[i])},
                        {"mean", net.mean(k)},
                        {"scale", net.scale(k)},
                        {"train_min", net.feature_min[i]},
                        {"train_max", net.feature_max[i]}});
  }
  nlohmann::json members = nlohmann::json::array();
  for (const Member& m : net.members) {
    members.push_back({{"seed", m.seed},
                       {"epochs", m.epochs},
                       {"best_epoch", m.best_epoch},
                       {"train_loss", m.train_loss},
                       {"validation_loss", m.validation_loss},
                       {"w", MatrixJson(m.w)},
                       {"b", VectorJson(m.b)},
                       {"v", VectorJson(m.v)},
                       {"u", VectorJson(m.u)},
                       {"c", m.c}});
  }
  return {{"features", features},
          {"target", {{"what", "log(device bytes)"}, {"mean", net.y_mean}, {"scale", net.y_scale}}},
          {"architecture",
           {{"hidden", net.members.empty() ? 0 : net.members[0].w.rows()},
            {"activation", "tanh"},
            {"skip", true},
            {"monotone", "v >= 0; w[:, i] >= 0 and u[i] >= 0 for monotone features"}}},
          {"members", members},
          {"interval", {{"margin_below", net.margin_below}, {"margin_above", net.margin_above}}},
          {"known_ops", net.known_ops}};
}

Result<Network> NetworkFromJson(const nlohmann::json& j) {
  try {
    Network net;
    if (!j.is_object() || !j.contains("features") || !j["features"].is_array()) {
      return InvalidArgument("learned weights: no features array");
    }
    const size_t f = j["features"].size();
    net.mean.resize(static_cast<Eigen::Index>(f));
    net.scale.resize(static_cast<Eigen::Index>(f));
    for (size_t i = 0; i < f; ++i) {
      const nlohmann::json& fj = j["features"][i];
      const auto k = static_cast<Eigen::Index>(i);
      net.feature_names.push_back(fj.at("name").get<std::string>());
      net.monotone.push_back(fj.at("monotone").get<bool>());
      MEMEST_ASSIGN_OR_RETURN(net.mean(k), NumberFrom(fj.at("mean"), "mean"));
      MEMEST_ASSIGN_OR_RETURN(net.scale(k), NumberFrom(fj.at("scale"), "scale"));
      MEMEST_ASSIGN_OR_RETURN(double lo, NumberFrom(fj.at("train_min"), "train_min"));
      MEMEST_ASSIGN_OR_RETURN(double hi, NumberFrom(fj.at("train_max"), "train_max"));
      net.feature_min.push_back(lo);
      net.feature_max.push_back(hi);
    }
    const nlohmann::json& target = j.at("target");
    MEMEST_ASSIGN_OR_RETURN(net.y_mean, NumberFrom(target.at("mean"), "target.mean"));
    MEMEST_ASSIGN_OR_RETURN(net.y_scale, NumberFrom(target.at("scale"), "target.scale"));
    const nlohmann::json& members = j.at("members");
    if (!members.is_array() || members.empty()) {
      return InvalidArgument("learned weights: no members");
    }
    for (const nlohmann::json& mj : members) {
      Member m;
      m.seed = mj.value("seed", uint64_t{0});
      m.epochs = mj.value("epochs", 0);
      m.best_epoch = mj.value("best_epoch", 0);
      m.train_loss = mj.value("train_loss", 0.0);
      m.validation_loss = mj.value("validation_loss", 0.0);
      const nlohmann::json& w = mj.at("w");
      if (!w.is_array() || w.empty()) return InvalidArgument("learned weights: empty w");
      const size_t h = w.size();
      m.w.resize(static_cast<Eigen::Index>(h), static_cast<Eigen::Index>(f));
      for (size_t r = 0; r < h; ++r) {
        MEMEST_ASSIGN_OR_RETURN(Eigen::VectorXd row, VectorFrom(w[r], "w row", f));
        m.w.row(static_cast<Eigen::Index>(r)) = row.transpose();
      }
      MEMEST_ASSIGN_OR_RETURN(m.b, VectorFrom(mj.at("b"), "b", h));
      MEMEST_ASSIGN_OR_RETURN(m.v, VectorFrom(mj.at("v"), "v", h));
      MEMEST_ASSIGN_OR_RETURN(m.u, VectorFrom(mj.at("u"), "u", f));
      MEMEST_ASSIGN_OR_RETURN(m.c, NumberFrom(mj.at("c"), "c"));
      net.members.push_back(std::move(m));
    }
    if (j.contains("interval")) {
      MEMEST_ASSIGN_OR_RETURN(net.margin_below,
                              NumberFrom(j["interval"].at("margin_below"), "margin_below"));
      MEMEST_ASSIGN_OR_RETURN(net.margin_above,
                              NumberFrom(j["interval"].at("margin_above"), "margin_above"));
    }
    if (j.contains("known_ops")) net.known_ops = j["known_ops"].get<std::vector<std::string>>();
    return net;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("learned weights: ") + e.what());
  }
}

}  // namespace memest::learned
