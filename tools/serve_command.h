// tools/serve_command.h -- `memest serve (MODEL.onnx | --hf-config config.json) --max-model-len L`:
// the KV cache a vLLM server gets on a GPU, its tokens and concurrent requests (memest/serving.h).
#ifndef MEMEST_TOOLS_SERVE_COMMAND_H_
#define MEMEST_TOOLS_SERVE_COMMAND_H_

namespace memest::cli {

// argv[0] is "serve". Exit codes: 0 the server starts (one max-model-len request fits); 1 it does
// not; 2 usage; 3 a model or config that cannot be loaded or estimated; 4 internal.
int RunServe(int argc, char** argv);

}  // namespace memest::cli

#endif  // MEMEST_TOOLS_SERVE_COMMAND_H_
