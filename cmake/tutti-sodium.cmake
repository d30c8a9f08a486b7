# SPDX-License-Identifier: Apache-2.0
# libsodium, for sealed shards and the audit trail (include/tutti/data/{sealed,audit}.hpp, the
# `tutti seal` and `tutti audit` commands). Optional: without it those headers are left out of
# the header check, their tests compile to nothing and the two commands say what is missing.
#
# Defines the imported target tutti::sodium (link it wherever those headers are included) and
# TUTTI_SODIUM (ON/OFF). tutti::tutti itself does not depend on it.
include_guard(GLOBAL)

if(NOT TARGET tutti::sodium)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(SODIUM QUIET IMPORTED_TARGET GLOBAL libsodium)
  endif()
  if(TARGET PkgConfig::SODIUM)
    add_library(tutti::sodium INTERFACE IMPORTED GLOBAL)
    set_target_properties(tutti::sodium PROPERTIES INTERFACE_LINK_LIBRARIES PkgConfig::SODIUM)
  else()
    # Without pkg-config, a plain search: the sources test for <sodium.h> with __has_include,
    # so wherever the header is found the library must be linked too.
    find_path(TUTTI_SODIUM_INCLUDE_DIR sodium.h)
    find_library(TUTTI_SODIUM_LIBRARY sodium)
    if(TUTTI_SODIUM_INCLUDE_DIR AND TUTTI_SODIUM_LIBRARY)
      add_library(tutti::sodium UNKNOWN IMPORTED GLOBAL)
      set_target_properties(tutti::sodium PROPERTIES
        IMPORTED_LOCATION "${TUTTI_SODIUM_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${TUTTI_SODIUM_INCLUDE_DIR}")
    endif()
  endif()
endif()

if(TARGET tutti::sodium)
  set(TUTTI_SODIUM ON)
else()
  set(TUTTI_SODIUM OFF)
endif()
message(STATUS "tutti: libsodium (sealed shards, audit trail): ${TUTTI_SODIUM}")
