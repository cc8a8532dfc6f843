// tools/pack_command.h -- `memest pack --gpu NAME [--gpus M] [--mps] JOB...`: whether jobs fit on
// one GPU together, or how they go onto M GPUs (memest/pack.h; the placement is the library's).
#ifndef MEMEST_TOOLS_PACK_COMMAND_H_
#define MEMEST_TOOLS_PACK_COMMAND_H_

namespace memest::cli {

// argv[0] is "pack". A JOB is MODEL.onnx[:KEY=VALUE[,KEY=VALUE...]] with the keys of the JSON
// options (batch=32, precision=amp-bf16, mode=infer, dim.seq=512, ...). Exit codes: 0 all jobs
// fit (placed); 1 they do not (some unplaced); 2 usage; 3 a model that cannot be loaded or
// estimated; 4 internal.
int RunPack(int argc, char** argv);

}  // namespace memest::cli

#endif  // MEMEST_TOOLS_PACK_COMMAND_H_
