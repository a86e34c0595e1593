# The inline proxy under abuse (issue 18): log floods, slow clients, limits, unparseable answers.
km_add_test(test_inline_abuse SOURCES ${CMAKE_CURRENT_LIST_DIR}/start/test_inline_abuse.c)
target_link_libraries(test_inline_abuse PRIVATE km_inline_rig)
target_include_directories(test_inline_abuse PRIVATE ${CMAKE_CURRENT_LIST_DIR})
km_add_test(test_inline_memory SOURCES ${CMAKE_CURRENT_LIST_DIR}/start/test_inline_memory.c TIMEOUT 400)
target_link_libraries(test_inline_memory PRIVATE km_inline_rig)
target_include_directories(test_inline_memory PRIVATE ${CMAKE_CURRENT_LIST_DIR})
km_inline_threads_variants(test_inline_abuse test_inline_memory) # see tests/inline.cmake
