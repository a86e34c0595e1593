# tests/inline.cmake: the inline proxy (proxy/inline) against librdkafka clients and its mock cluster.
set(KM_INLINE_TESTS ${CMAKE_CURRENT_LIST_DIR})
add_library(km_inline_rig STATIC ${KM_INLINE_TESTS}/test_inline_rig.c)
target_link_libraries(km_inline_rig PUBLIC km_inline km_testsupport PkgConfig::RDKAFKA)
km_add_test(test_inline_forward SOURCES ${KM_INLINE_TESTS}/test_inline_forward.c)
target_link_libraries(test_inline_forward PRIVATE km_inline_rig)
km_add_test(test_inline_edge SOURCES ${KM_INLINE_TESTS}/test_inline_edge.c)
target_link_libraries(test_inline_edge PRIVATE km_inline_rig)
