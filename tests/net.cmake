# tests/net.cmake: TLS, event-loop connections and capture (tls/, proxy/net, proxy/capture).
set(KM_NET_TESTS ${CMAKE_CURRENT_LIST_DIR})
km_add_test(test_tls SOURCES ${KM_NET_TESTS}/test_tls.c ${KM_NET_TESTS}/test_tls_certs.c)
km_add_test(test_net SOURCES ${KM_NET_TESTS}/test_net.c ${KM_NET_TESTS}/test_tls_certs.c)
km_add_test(test_net_splice SOURCES ${KM_NET_TESTS}/test_net_splice.c)
km_add_test(test_capture SOURCES ${KM_NET_TESTS}/test_capture.c)
km_add_test(test_capture_net SOURCES ${KM_NET_TESTS}/test_capture_net.c)
