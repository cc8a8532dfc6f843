# Writes the JSON file IN into a C++ source OUT as memest::core::kGpuProfilesJson.
file(READ ${IN} content)
file(WRITE ${OUT} "// Generated from gpu_profiles.json by core/embed_json.cmake. Do not edit.\n"
  "namespace memest::core {\nextern const char kGpuProfilesJson[];\n"
  "const char kGpuProfilesJson[] = R\"memest_json(${content})memest_json\";\n}  // namespace memest::core\n")
