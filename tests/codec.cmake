# Codec: generated tables, engine, JSON and the wire CLI.
km_add_test(test_codec_roundtrip SOURCES ${CMAKE_CURRENT_LIST_DIR}/codec/test_codec_roundtrip.c
                                         ${CMAKE_CURRENT_LIST_DIR}/codec/codec_fill.c)
km_add_test(test_codec_golden SOURCES ${CMAKE_CURRENT_LIST_DIR}/codec/test_codec_golden.c)
km_add_test(test_codec_errors SOURCES ${CMAKE_CURRENT_LIST_DIR}/codec/test_codec_errors.c
                                      ${CMAKE_CURRENT_LIST_DIR}/codec/codec_fill.c)
km_add_test(test_wire_cli SOURCES ${CMAKE_CURRENT_LIST_DIR}/codec/test_wire_cli.c)
# The fuzz targets' replay builds run over the real corpus files (skipped in effect when absent).
file(GLOB KM_FUZZ_SEEDS ${KM_SHARED_DIR}/corpus/kraft-log/* ${KM_SHARED_DIR}/corpus/kraft-snapshot/*)
add_test(NAME fuzz_metalog_replay COMMAND fuzz_metalog ${KM_FUZZ_SEEDS})
add_test(NAME fuzz_codec_replay COMMAND fuzz_codec ${KM_FUZZ_SEEDS})
