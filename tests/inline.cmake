# tests/inline.cmake: the inline proxy (proxy/inline) against librdkafka clients and its mock cluster.
set(KM_INLINE_TESTS ${CMAKE_CURRENT_LIST_DIR})
add_library(km_inline_rig STATIC ${KM_INLINE_TESTS}/test_inline_rig.c)
target_link_libraries(km_inline_rig PUBLIC km_inline km_testsupport PkgConfig::RDKAFKA)
km_add_test(test_inline_forward SOURCES ${KM_INLINE_TESTS}/test_inline_forward.c)
target_link_libraries(test_inline_forward PRIVATE km_inline_rig)
km_add_test(test_inline_edge SOURCES ${KM_INLINE_TESTS}/test_inline_edge.c)
target_link_libraries(test_inline_edge PRIVATE km_inline_rig)
km_add_test(test_inline_splice SOURCES ${KM_INLINE_TESTS}/test_inline_splice.c)
target_link_libraries(test_inline_splice PRIVATE km_inline_rig)
km_add_test(test_inline_cli SOURCES ${KM_INLINE_TESTS}/test_inline_cli.c)
target_link_libraries(test_inline_cli PRIVATE km_inline_rig)
km_add_test(test_inline_tls SOURCES ${KM_INLINE_TESTS}/test_inline_tls.c ${KM_INLINE_TESTS}/test_tls_certs.c)
target_link_libraries(test_inline_tls PRIVATE km_inline_rig PkgConfig::OPENSSL)
km_add_test(test_inline_capture SOURCES ${KM_INLINE_TESTS}/test_inline_capture.c)
target_link_libraries(test_inline_capture PRIVATE km_inline_rig PkgConfig::JANSSON)
km_add_test(test_inline_daemon SOURCES ${KM_INLINE_TESTS}/test_inline_daemon.c)
target_link_libraries(test_inline_daemon PRIVATE km_inline_rig)
km_add_test(test_inline_inspect SOURCES ${KM_INLINE_TESTS}/test_inline_inspect.c)
target_link_libraries(test_inline_inspect PRIVATE km_inline_rig)
# 10 rounds of 100,000 librdkafka messages through two worker threads (3 under ASan).
km_add_test(test_inline_volume SOURCES ${KM_INLINE_TESTS}/test_inline_volume.c TIMEOUT 600)
target_link_libraries(test_inline_volume PRIVATE km_inline_rig)
# Responses built by Kafka's kafka-clients (../shared/realkafka) through tests/java/ResponseBuilder.java.
km_add_test(test_inline_realkafka SOURCES ${KM_INLINE_TESTS}/test_inline_realkafka.c TIMEOUT 300)
target_link_libraries(test_inline_realkafka PRIVATE km_inline_rig)

# Every inline suite with 1 and 3 worker threads (km_inline_threads_variants, tests/CMakeLists.txt).
km_inline_threads_variants(test_inline_forward test_inline_edge test_inline_splice test_inline_cli test_inline_tls
                           test_inline_capture test_inline_daemon test_inline_inspect test_inline_realkafka)
