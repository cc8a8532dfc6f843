# Writes the JSON file IN into a C++ source OUT as memest::base::${SYMBOL} (a const char[]).
# With SPLIT set to the name of a top-level array of objects that each have a "name", also writes
# each element's JSON text on its own, with its name: ${SYMBOL}Count, ${SYMBOL}Names[] and
# ${SYMBOL}Elements[], so that one element can be parsed without the whole document.
file(READ ${IN} content)
get_filename_component(name ${IN} NAME)
file(WRITE ${OUT} "// Generated from ${name} by base/embed_json.cmake. Do not edit.\n"
  "namespace memest::base {\nextern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"memest_json(${content})memest_json\";\n}  // namespace memest::base\n")
if(SPLIT)
  string(JSON count LENGTH "${content}" ${SPLIT})
  math(EXPR last "${count} - 1")
  set(names "")
  set(elements "")
  foreach(i RANGE ${last})
    string(JSON element_name GET "${content}" ${SPLIT} ${i} name)
    string(JSON element GET "${content}" ${SPLIT} ${i})
    string(APPEND names "    \"${element_name}\",\n")
    string(APPEND elements "    R\"memest_json(${element})memest_json\",\n")
  endforeach()
  file(APPEND ${OUT} "namespace memest::base {\n"
    "extern const int ${SYMBOL}Count;\nconst int ${SYMBOL}Count = ${count};\n"
    "extern const char* const ${SYMBOL}Names[];\n"
    "const char* const ${SYMBOL}Names[] = {\n${names}};\n"
    "extern const char* const ${SYMBOL}Elements[];\n"
    "const char* const ${SYMBOL}Elements[] = {\n${elements}};\n"
    "}  // namespace memest::base\n")
endif()
