# cmake -DINPUT=<text file> -DOUTPUT=<.cpp> -DHEADER=<include> -DNAMESPACE=<ns> -DFUNCTION=<name>
#       -P embed_text.cmake
# Writes a C++ source defining `std::string_view <NAMESPACE>::<FUNCTION>()` that returns the bytes
# of INPUT, embedded as a raw string literal (the build runs this; the output is not committed).
foreach(var INPUT OUTPUT HEADER NAMESPACE FUNCTION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_text.cmake: -D${var}=... is required")
  endif()
endforeach()
file(READ "${INPUT}" text)
get_filename_component(INPUT_NAME "${INPUT}" NAME)
set(delimiter "kvserve_embed")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "embed_text.cmake: ${INPUT} contains the raw-string delimiter )${delimiter}\"")
endif()
string(CONCAT source
  "// GENERATED at build time by cmake/embed_text.cmake from ${INPUT_NAME}. Do not edit.\n"
  "#include \"${HEADER}\"\n\n"
  "namespace ${NAMESPACE} {\n\n"
  "std::string_view ${FUNCTION}() {\n"
  "  static constexpr std::string_view kText = R\"${delimiter}(\n"
  "${text}"
  ")${delimiter}\";\n"
  "  return kText.substr(1);  // drop the newline after the opening delimiter\n"
  "}\n\n"
  "}  // namespace ${NAMESPACE}\n")
# Replace the output only when it changed, so an unchanged table does not recompile.
file(WRITE "${OUTPUT}.tmp" "${source}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
