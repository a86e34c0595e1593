# Debian's hardening flags (dpkg-buildflags' "hardening=+all" minus what a C daemon cannot use) in every
# build type: kmproxy parses untrusted Kafka and ZooKeeper traffic inline, so whatever binary a user
# builds gets a canary on every stack frame with an array, bounds-checked libc calls, an address-space
# layout it cannot predict (PIE) and a GOT it cannot overwrite (full RELRO + immediate binding).
# tests/package/test_hardening.sh checks the built binary with hardening-check.
#
# _FORTIFY_SOURCE only works with optimisation (glibc warns and ignores it at -O0, which -Werror turns
# into a failed build), so the Debug build, a developer's -O0 build, leaves it out, as dpkg-buildflags
# does with DEB_BUILD_OPTIONS=noopt (-Og instead would make gcc's -Wmaybe-uninitialized report
# differently from every other build type).  The builds a user gets (`make`, `make package` and the
# Containerfile: RelWithDebInfo, Release; MinSizeRel) have it.  The sanitizer and libFuzzer builds
# (KM_SANITIZE, KM_FUZZ) leave it out too: ASan intercepts the same libc calls and checks them more
# precisely, and the *_chk variants hide accesses from its instrumentation.  All keep the rest.
include(CheckPIESupported)
check_pie_supported(LANGUAGES C)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)  # -fPIE for executables, -pie at link (CMP0083)

add_compile_options(-fstack-protector-strong -fstack-clash-protection)
if(NOT KM_SANITIZE AND NOT KM_FUZZ)
  # -U first: a compiler that predefines another level (Ubuntu's gcc: 3) would warn of a redefinition
  add_compile_options(-U_FORTIFY_SOURCE $<$<NOT:$<CONFIG:Debug>>:-D_FORTIFY_SOURCE=2>)
endif()
add_link_options(LINKER:-z,relro LINKER:-z,now)
