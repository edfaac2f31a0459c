# embed.cmake — cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# Writes a C file defining `const char NAME[]` (NUL-terminated) and `const size_t NAME_len` with
# the bytes of IN (used for the OpenAPI document served at /openapi.yaml).
if(NOT NAME)
  set(NAME qr_openapi_yaml)
endif()
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR n "${n_hex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE ${OUT} "/* generated from ${IN} by embed.cmake; do not edit */\n#include <stddef.h>\nconst char ${NAME}[] = {\n${body}0x00};\nconst size_t ${NAME}_len = ${n};\n")
