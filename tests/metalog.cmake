# tests/metalog.cmake: the __cluster_metadata log reader/writer (protocol/km_metalog.h).
set(KM_METALOG_TEST_UTIL ${CMAKE_CURRENT_SOURCE_DIR}/test_metalog_util.c)
km_add_test(test_metalog_format SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_metalog_format.c ${KM_METALOG_TEST_UTIL})
km_add_test(test_metalog_follow SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_metalog_follow.c ${KM_METALOG_TEST_UTIL})
km_add_test(test_metalog_corpus SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_metalog_corpus.c ${KM_METALOG_TEST_UTIL})
# test_metalog_format calls libsnappy directly to build a raw (unframed) snappy batch.
target_link_libraries(test_metalog_format PRIVATE PkgConfig::SNAPPY)
km_add_test(test_metalog_interop SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_metalog_interop.c ${KM_METALOG_TEST_UTIL} TIMEOUT 300)
