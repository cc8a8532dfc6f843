# Writes the JSON file IN into a C++ source OUT as memest::base::${SYMBOL} (a const char[]).
file(READ ${IN} content)
get_filename_component(name ${IN} NAME)
file(WRITE ${OUT} "// Generated from ${name} by base/embed_json.cmake. Do not edit.\n"
  "namespace memest::base {\nextern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"memest_json(${content})memest_json\";\n}  // namespace memest::base\n")
