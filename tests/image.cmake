# tests/image.cmake: the metadata image, deltas, generator and `kmproxy metadata` (protocol/image*, proxy/cli/cli_metadata.c).
set(KM_IMAGE_TESTS ${CMAKE_CURRENT_LIST_DIR})
km_add_test(test_image_delta SOURCES ${KM_IMAGE_TESTS}/test_image_delta.c ${KM_IMAGE_TESTS}/test_image_util.c)
km_add_test(test_image_corpus SOURCES ${KM_IMAGE_TESTS}/test_image_corpus.c)
km_add_test(test_image_gen SOURCES ${KM_IMAGE_TESTS}/test_image_gen.c ${KM_IMAGE_TESTS}/test_image_util.c)
km_add_test(test_image_dirs SOURCES ${KM_IMAGE_TESTS}/test_image_dirs.c ${KM_IMAGE_TESTS}/test_image_util.c)
