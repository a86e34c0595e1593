# bench/quorum.cmake: snapshot + records fetched as a KRaft observer over loopback vs loaded from disk.
add_executable(bench_quorum ${CMAKE_CURRENT_SOURCE_DIR}/bench_quorum.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_util.c)
target_link_libraries(bench_quorum PRIVATE km_quorum km_raftsim km_protocol)
add_dependencies(benches bench_quorum)
