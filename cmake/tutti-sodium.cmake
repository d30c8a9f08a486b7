# SPDX-License-Identifier: Apache-2.0
# libsodium, for sealed shards and the audit trail (include/tutti/data/{sealed,audit}.hpp, the
# `tutti seal` and `tutti audit` commands). Optional: without it those headers are left out of
# the header check, their tests compile to nothing and the two commands say what is missing.
#
# Defines the imported target tutti::sodium (libsodium and nlohmann-json; link it wherever those
# headers are included) and TUTTI_SODIUM (ON/OFF). tutti::tutti itself does not depend on it.
include_guard(GLOBAL)

if(NOT TARGET tutti::sodium)
  # The shards' manifests and the audit trail are JSON: nlohmann-json (Debian's
  # nlohmann-json3-dev) comes with the component.
  block(SCOPE_FOR VARIABLES)
    set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL ON)
    find_package(nlohmann_json 3 CONFIG QUIET)
    find_package(PkgConfig QUIET)
    if(PkgConfig_FOUND)
      pkg_check_modules(SODIUM QUIET IMPORTED_TARGET GLOBAL libsodium)
    endif()
    set(sodium_library)
    if(TARGET PkgConfig::SODIUM)
      set(sodium_library PkgConfig::SODIUM)
    else()
      # Without pkg-config, a plain search: the sources test for <sodium.h> with __has_include,
      # so wherever the header is found the library must be linked too.
      find_path(TUTTI_SODIUM_INCLUDE_DIR sodium.h)
      find_library(TUTTI_SODIUM_LIBRARY sodium)
      if(TUTTI_SODIUM_INCLUDE_DIR AND TUTTI_SODIUM_LIBRARY)
        add_library(tutti::sodium_library UNKNOWN IMPORTED GLOBAL)
        set_target_properties(tutti::sodium_library PROPERTIES
          IMPORTED_LOCATION "${TUTTI_SODIUM_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${TUTTI_SODIUM_INCLUDE_DIR}")
        set(sodium_library tutti::sodium_library)
      endif()
    endif()
    if(sodium_library AND TARGET nlohmann_json::nlohmann_json)
      add_library(tutti::sodium INTERFACE IMPORTED GLOBAL)
      set_target_properties(tutti::sodium PROPERTIES
        INTERFACE_LINK_LIBRARIES "${sodium_library};nlohmann_json::nlohmann_json")
    elseif(sodium_library)
      message(STATUS "tutti: libsodium found, but not nlohmann-json (nlohmann-json3-dev), which "
                     "sealed shards and the audit trail also need")
    endif()
  endblock()
endif()

if(TARGET tutti::sodium)
  set(TUTTI_SODIUM ON)
else()
  set(TUTTI_SODIUM OFF)
endif()
if(NOT tutti_FIND_QUIETLY)
  message(STATUS "tutti: libsodium (tutti::sodium, sealed shards, audit trail): ${TUTTI_SODIUM}")
endif()
