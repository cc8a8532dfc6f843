// datasets/gpumemnet/gpumemnet.h -- GPUMemNet's 6,000 MLP measurements, rebuilt as ONNX graphs.
//
// Data: itu-rad/GPUMemNet, Datasets/MLP/mlp_data_step1.csv and mlp_data_step2.csv (3,000 rows
// each), CC BY 4.0 (citation in kCitation and datasets/gpumemnet/README.md).
//
// Policy:
//  * Row index: 0..2999 are mlp_data_step1.csv's data rows in file order, 3000..5999 those of
//    mlp_data_step2.csv. Measured rows name the model "gpumemnet:<row index>".
//  * The layer list (`Activations-Params`) is the ground truth of the architecture; the Filename
//    fields (input, output, depth, arch, batch, act, dropout rate and flags, batchnorm) are parsed
//    and cross-checked against it (a disagreement is an InvalidModel error naming the row).
//  * The graph is what GPUMemNet's generator built (nn.Sequential of [Linear, (BatchNorm1d), act,
//    (Dropout)] x depth, Linear, then Softmax(dim=1) / Sigmoid / Identity), exported the way
//    torch.onnx.export writes it in training mode at opset 17: Gemm(transB=1), BatchNormalization
//    (training_mode=1, 3 outputs), Dropout (ratio from the Filename, training_mode=true, mask
//    output), activations as in datasets/zoo/layers.h (Identity adds no node). Step-2 models
//    flatten their input first (x.view(x.size(0), -1)): a Reshape [0, input], a no-op view.
//  * nn.PReLU() has one parameter per layer that the CSV's `Total Parameters` does not count
//    (GPUMemNet's cleaner counts Linear and BatchNorm lines only). The graph keeps it (a [1]
//    slope), so Rebuilt::torch_parameters = csv_parameters + number of PReLU layers.
//  * Weightless: weights are external ("gpumemnet_<index>.weights", never written).
// Thread safety: free functions without shared state.
#ifndef MEMEST_DATASETS_GPUMEMNET_GPUMEMNET_H_
#define MEMEST_DATASETS_GPUMEMNET_GPUMEMNET_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memest/status.h"

namespace memest::gpumemnet {

inline constexpr const char* kCitation =
    "E. Yousefzadeh-Asl-Miandoab, R. Karimzadeh, D. Yorulmaz, B. Ibragimov, P. Tözün, \"GPU "
    "Memory and Utilization Estimation for Training-Aware Resource Management: Opportunities and "
    "Limitations\", EuroMLSys 2026; data: github.com/itu-rad/GPUMemNet Datasets/MLP, licensed "
    "CC BY 4.0";
inline constexpr const char* kDevice = "NVIDIA A100-SXM4-40GB";
inline constexpr const char* kCsvFiles[2] = {"mlp_data_step1.csv", "mlp_data_step2.csv"};
inline constexpr int kRowsPerFile = 3000;

struct Layer {
  std::string type;  // as in the CSV: linear, batch_normalization, dropout, ReLU, Softmax, ...
  int64_t features = 0;
  int64_t params = 0;
};

struct Row {
  int index = 0;         // 0..5999 (see policy)
  std::string csv_file;  // "mlp_data_step1.csv"
  int csv_row = 0;       // 1-based data row in that file (the header is not counted)
  std::string filename;  // the CSV's Filename column
  int64_t input = 0, output = 0, depth = 0, batch = 0;
  std::string arch;
  std::string act = "relu";  // Filename act (step 2); step 1 is always relu
  double dropout_rate = 0.0;
  bool dropout = false, batchnorm = false;
  std::vector<Layer> layers;
  int64_t total_parameters = 0;  // CSV `Total Parameters`
  int64_t max_memory_mib = 0;    // CSV `Max GPU Memory (MiB)`
};

// Parses one CSV (`step` 1 or 2); row indices start at (step - 1) * 3000.
Result<std::vector<Row>> ReadCsv(const std::string& path, int step);
// Both CSVs from `dir` (6,000 rows).
Result<std::vector<Row>> ReadAll(const std::string& dir);
// The first of `candidates` that holds both CSVs, or NotFound.
Result<std::string> FindDataDir(const std::vector<std::string>& candidates);

struct Rebuilt {
  onnx::ModelProto model;
  std::string bytes;   // deterministic serialization
  std::string sha256;  // of bytes
  int64_t batch = 0;
  int64_t measured_mib = 0;
  int64_t csv_parameters = 0;    // the CSV's Total Parameters
  int64_t torch_parameters = 0;  // PyTorch's count of the rebuilt model (PReLU slopes included)
  int64_t prelu_layers = 0;
};

// Builds the ONNX graph of `row`. InvalidModel when the Filename and the layer list disagree or a
// layer's parameter count is not what its type and widths imply.
Result<Rebuilt> Rebuild(const Row& row);

// Why a row's measurement is not a training step, or "" when nothing is known against it.
// GPUMemNet's step-1 script (NeuroNetGen_scripts/MLP/mlp.py) used BCEWithLogitsLoss for one output
// but fed it int64 labels of shape [N] against outputs [N, 1], which raises at the first loss: the
// 22 step-1 rows with output 1 measured weights + one forward pass only (their peak minus the
// 1,443 MiB floor is 0.8-1.7x the fp32 weights; every other step-1 row is >= 5x).
std::string KnownIssue(const Row& row);

// The measured row (docs/measured-row-schema.md) of `row`: device level only. Rows with a
// KnownIssue() get status "error" and the issue as `error` (the peak is kept: it was measured).
nlohmann::json MeasuredRow(const Row& row, const Rebuilt& rebuilt);

}  // namespace memest::gpumemnet

#endif  // MEMEST_DATASETS_GPUMEMNET_GPUMEMNET_H_
