# tests/quorum.cmake: the KRaft observer (proxy/quorum) against the raft simulator (tests/raftsim).
set(KM_QUORUM_TESTS ${CMAKE_CURRENT_LIST_DIR})
add_subdirectory(${KM_QUORUM_TESTS}/raftsim ${CMAKE_BINARY_DIR}/tests/raftsim)
