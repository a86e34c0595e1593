# tests/sasl.cmake: SASL/PLAIN and SCRAM (proxy/sasl), against the RFCs' vectors.
km_add_test(test_sasl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sasl.c)
