# find_package(Loom): the `loom` compiler as the imported executable Loom::loom, plus
#
#   loom_add_library(<name> SOURCES <file>... [LIBRARIES <lib>...] [OUTPUT_DIR <dir>])
#   loom_add_kernels(<name> SOURCES <file>... TARGETS <family:selector>...
#                    [LIBRARIES <lib>...] [CONFIG <key=value>...] [ROOTS <@sym>...]
#                    [PIPELINE <text>] [OUTPUT_DIR <dir>])
#   loom_add_test(<name> SOURCES <file>... [LIBRARIES <lib>...] [CONFIG <key=value>...]
#                 [DEVICE auto|vulkan|interpreter])
#
# This folder ships inside loom's Python package; `loom --cmake-dir` prints it, so
# `cmake -DLoom_DIR="$(loom --cmake-dir)"` finds it. See docs/cmake.md.
#
# The loom that runs: LOOM_EXECUTABLE (a cache variable) if set, else $ENV{LOOM_BIN}, else
# `loom` on PATH. Each command is an add_custom_command whose DEPENDS name every file loom
# reads (its sources and library files: a compile reads nothing else, tests/test_cmake.py
# checks it against loom's own depfile) and, from CMake 3.28, JOB_SERVER_AWARE so that under
# `make -jN` loom shares make's job tokens. No DEPFILE: it would add nothing, and CMake runs
# every command's depfile through one more process of its own (`cmake -E
# cmake_transform_depfile`, about 5 ms: a fifth of a served compile). Unless LOOM_USE_SERVER
# is OFF, each command runs with LOOM_SERVER=auto (see below).

if(CMAKE_VERSION VERSION_LESS 3.20)
  message(FATAL_ERROR "Loom's CMake package needs CMake 3.20 or newer; this is ${CMAKE_VERSION}")
endif()
include_guard(GLOBAL)

if(NOT LOOM_EXECUTABLE)
  if(DEFINED ENV{LOOM_BIN} AND NOT "$ENV{LOOM_BIN}" STREQUAL "")
    set(LOOM_EXECUTABLE "$ENV{LOOM_BIN}" CACHE FILEPATH "The loom executable")
  else()
    find_program(LOOM_EXECUTABLE NAMES loom DOC "The loom executable")
  endif()
endif()
if(NOT LOOM_EXECUTABLE)
  set(Loom_FOUND FALSE)
  set(Loom_NOT_FOUND_MESSAGE "no `loom` on PATH; pip install loom-compiler, or set LOOM_EXECUTABLE or LOOM_BIN")
  return()
endif()

if(NOT TARGET Loom::loom)
  add_executable(Loom::loom IMPORTED GLOBAL)
  set_target_properties(Loom::loom PROPERTIES IMPORTED_LOCATION "${LOOM_EXECUTABLE}")
endif()

# Each command runs with LOOM_SERVER=auto: the first starts this user's resident loom server
# (`loom server`, docs/cmake.md), every later one hands its work to it instead of starting
# Python and LLVM again. -DLOOM_USE_SERVER=OFF runs every command in its own process.
option(LOOM_USE_SERVER "Run loom's commands through its resident server (LOOM_SERVER=auto)" ON)
set(_loom_settings)  # the environment variables loom's commands run with
if(LOOM_USE_SERVER AND UNIX)
  list(APPEND _loom_settings LOOM_SERVER=auto)
endif()

# CMake 3.28 marks such recipes for make's jobserver (`+`); older versions simply run them serially.
# There, loom is told which CMake runs it (LOOM_BUILD_TOOL), so that the one warning it gives per
# build about make's unusable jobserver says that nothing needs doing. LOOM_JOB_SERVER_AWARE=OFF
# gives the older behaviour on a newer CMake (the tests use it).
set(_loom_aware OFF)
if(NOT CMAKE_VERSION VERSION_LESS 3.28)
  set(_loom_aware ON)
endif()
option(LOOM_JOB_SERVER_AWARE "Mark loom's commands for make's jobserver (CMake 3.28 or newer)" ${_loom_aware})
mark_as_advanced(LOOM_JOB_SERVER_AWARE)
set(_LOOM_JOB_SERVER)
if(LOOM_JOB_SERVER_AWARE AND _loom_aware)
  set(_LOOM_JOB_SERVER JOB_SERVER_AWARE TRUE)
elseif(CMAKE_GENERATOR MATCHES "Makefiles")
  list(APPEND _loom_settings "LOOM_BUILD_TOOL=CMake ${CMAKE_VERSION} with ${CMAKE_GENERATOR}")
endif()

# How a build command sets them (loom_add_test's tests take them as their environment). Ninja
# and the Unix Makefiles run each command line through /bin/sh, where a leading NAME=value word
# sets NAME for that command alone: nothing else is started. A value with a space would be
# quoted, and so no longer an assignment; that, and any other generator, takes env(1) (a
# millisecond an exec, which the shell spares) or `cmake -E env` (ten).
# With the server in use, the commands call loom's native client (`loom server client`, built
# here once per configure with the project's C compiler, else cc, gcc or clang): it hands a
# command to the server without starting Python, 7 to 8 ms less a command, and runs everything
# else through loom itself. No C compiler, or -DLOOM_NATIVE_CLIENT=OFF: loom itself.
option(LOOM_NATIVE_CLIENT "Call loom's native client, which skips Python's start-up for a served command" ON)
mark_as_advanced(LOOM_NATIVE_CLIENT)
set(_loom_program "$<TARGET_FILE:Loom::loom>")
if(_loom_settings AND LOOM_USE_SERVER AND LOOM_NATIVE_CLIENT AND UNIX AND NOT CMAKE_HOST_APPLE)
  set(_loom_client "${CMAKE_BINARY_DIR}/CMakeFiles/loom/loom-client")
  set(_loom_cc)
  if(CMAKE_C_COMPILER)
    set(_loom_cc --cc "${CMAKE_C_COMPILER}")
  endif()
  file(MAKE_DIRECTORY "${CMAKE_BINARY_DIR}/CMakeFiles/loom")
  execute_process(COMMAND "${LOOM_EXECUTABLE}" server client -o "${_loom_client}" --launcher "${LOOM_EXECUTABLE}"
                          ${_loom_cc}
                  RESULT_VARIABLE _loom_built ERROR_VARIABLE _loom_why OUTPUT_QUIET)
  if(_loom_built EQUAL 0)
    set(_loom_program "${_loom_client}")
    # A loom upgrade that changes the client's side of the protocol re-runs this configure step,
    # which builds the client anew (an older client would still be right: the server refuses
    # what it cannot take, and the client then runs loom itself, without the time it saves).
    if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/../runtime/client.c")
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/../runtime/client.c")
    endif()
  else()
    string(STRIP "${_loom_why}" _loom_why)
    message(STATUS "Loom: no native client (${_loom_why}); commands call loom itself")
  endif()
endif()
set(_LOOM_COMMAND Loom::loom)
if(_loom_settings)
  set(_loom_words ON)
  foreach(setting IN LISTS _loom_settings)
    if(NOT setting MATCHES "^[A-Z_]+=[A-Za-z0-9_.:/+-]*$")
      set(_loom_words OFF)
    endif()
  endforeach()
  if(UNIX AND _loom_words AND CMAKE_GENERATOR MATCHES "^(Ninja|Ninja Multi-Config|Unix Makefiles)$")
    set(_LOOM_COMMAND ${_loom_settings} "${_loom_program}")
  else()
    find_program(LOOM_ENV_EXECUTABLE NAMES env DOC "env(1), to set loom's environment for its commands")
    mark_as_advanced(LOOM_ENV_EXECUTABLE)
    if(LOOM_ENV_EXECUTABLE)
      set(_LOOM_COMMAND "${LOOM_ENV_EXECUTABLE}" ${_loom_settings} "${_loom_program}")
    else()
      set(_LOOM_COMMAND "${CMAKE_COMMAND}" -E env ${_loom_settings} "${_loom_program}")
    endif()
  endif()
endif()

# Absolute paths (relative ones are taken from the current source or binary folder).
function(_loom_absolute out base)
  set(result)
  foreach(path IN LISTS ARGN)
    get_filename_component(path "${path}" ABSOLUTE BASE_DIR "${base}")
    list(APPEND result "${path}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# LIBRARIES items: a loom_add_library target name, or a .loom/.loombc file.
# Sets <files> (what to pass as --library) and <depends> (files and targets to depend on).
function(_loom_libraries files depends)
  set(lib_files)
  set(lib_depends)
  foreach(lib IN LISTS ARGN)
    if(TARGET "${lib}")
      get_target_property(file "${lib}" LOOM_LIBRARY_FILE)
      if(NOT file)
        message(FATAL_ERROR "LIBRARIES ${lib}: a target, but not one made by loom_add_library")
      endif()
      list(APPEND lib_files "${file}")
      list(APPEND lib_depends "${file}" "${lib}")
    elseif(lib MATCHES "\\.loom(bc)?$")
      _loom_absolute(file "${CMAKE_CURRENT_SOURCE_DIR}" "${lib}")
      list(APPEND lib_files "${file}")
      list(APPEND lib_depends "${file}")
    else()
      message(FATAL_ERROR "LIBRARIES ${lib}: neither a loom_add_library target nor a .loom/.loombc file")
    endif()
  endforeach()
  set(${files} "${lib_files}" PARENT_SCOPE)
  set(${depends} "${lib_depends}" PARENT_SCOPE)
endfunction()

# CONFIG items (key=value) as --config options; `caller` names the call in errors.
function(_loom_config out caller)
  set(options)
  foreach(binding IN LISTS ARGN)
    if(NOT binding MATCHES "^[^=]+=")
      message(FATAL_ERROR "${caller}: CONFIG ${binding}: write key=value")
    endif()
    list(APPEND options "--config=${binding}")
  endforeach()
  set(${out} "${options}" PARENT_SCOPE)
endfunction()

function(_loom_output_dir out dir)
  if(NOT dir)
    set(dir "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  _loom_absolute(dir "${CMAKE_CURRENT_BINARY_DIR}" "${dir}")
  file(MAKE_DIRECTORY "${dir}")
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

# Writes <output_dir>/<name>.loombc: the SOURCES merged and resolved against LIBRARIES.
# Dependents name it in LIBRARIES; its key for module.import is <name>.
function(loom_add_library name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "OUTPUT_DIR" "SOURCES;LIBRARIES")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "loom_add_library(${name}): unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "loom_add_library(${name}): SOURCES is required")
  endif()
  _loom_absolute(sources "${CMAKE_CURRENT_SOURCE_DIR}" ${ARG_SOURCES})
  _loom_libraries(lib_files lib_depends ${ARG_LIBRARIES})
  _loom_output_dir(dir "${ARG_OUTPUT_DIR}")
  set(output "${dir}/${name}.loombc")
  list(TRANSFORM lib_files PREPEND "--library=")
  add_custom_command(
    OUTPUT "${output}"
    COMMAND ${_LOOM_COMMAND} link ${sources} ${lib_files} --mode merge -o "${output}"
    DEPENDS ${sources} ${lib_depends}
    COMMENT "Linking Loom library ${name}"
    ${_LOOM_JOB_SERVER}
    VERBATIM)
  add_custom_target(${name} ALL DEPENDS "${output}")
  _loom_test_sources(test_sources ${ARG_LIBRARIES})
  set_target_properties(${name} PROPERTIES LOOM_LIBRARY_FILE "${output}"
                                           LOOM_SOURCES "${sources};${test_sources}")
endfunction()

# Writes, per target, <output_dir>/<name>.<family>-<selector>.<ext> (.hsaco, .spv, .ptx) with
# .launch.loombc and .manifest.json beside it, and a custom target <name> that builds them.
# Several SOURCES are merged into one module first (loom link --mode merge).
function(loom_add_kernels name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "OUTPUT_DIR;PIPELINE" "SOURCES;TARGETS;LIBRARIES;CONFIG;ROOTS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "loom_add_kernels(${name}): unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SOURCES OR NOT ARG_TARGETS)
    message(FATAL_ERROR "loom_add_kernels(${name}): SOURCES and TARGETS are required")
  endif()
  _loom_absolute(sources "${CMAKE_CURRENT_SOURCE_DIR}" ${ARG_SOURCES})
  _loom_libraries(lib_files lib_depends ${ARG_LIBRARIES})
  _loom_output_dir(dir "${ARG_OUTPUT_DIR}")

  _loom_config(config "loom_add_kernels(${name})" ${ARG_CONFIG})
  set(options ${config})
  foreach(root IN LISTS ARG_ROOTS)
    list(APPEND options "--root=${root}")
  endforeach()
  if(ARG_PIPELINE)
    list(APPEND options "--pipeline=${ARG_PIPELINE}")
  endif()
  list(TRANSFORM lib_files PREPEND "--library=")

  list(LENGTH sources count)
  list(LENGTH ARG_TARGETS target_count)
  if(count EQUAL 1 AND target_count EQUAL 1)
    # One source for one target: its compile is the only command, and it reports the source's
    # errors once (and, as the check below would, refuses unresolved CONFIG).
    set(module "${sources}")
    set(module_depends "${sources}" ${lib_depends})
    list(APPEND options --require-resolved-config)
  elseif(count EQUAL 1)
    # The front end (read, verify, link, bind) runs once here, for every target: an error of
    # the source is reported once, not once per target, and no per-target command runs.
    # The per-target commands then compile the source itself, so that their diagnostics
    # (TARGET/*) point into it; this step's output only stands for "checked".
    set(module "${sources}")
    set(checked "${CMAKE_CURRENT_BINARY_DIR}/loom/${name}/${name}.checked.loombc")
    file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/loom/${name}")
    add_custom_command(
      OUTPUT "${checked}"
      COMMAND ${_LOOM_COMMAND} compile "${module}" -o "${checked}" ${lib_files} ${options}
              --pipeline none --require-resolved-config
      DEPENDS "${sources}" ${lib_depends}
      COMMENT "Checking Loom kernels ${name}"
      ${_LOOM_JOB_SERVER}
      VERBATIM)
    set(module_depends "${checked}" "${sources}" ${lib_depends})  # what each compile reads, and the check
  else()
    # Merging resolves against the libraries, so the compile steps need no --library; it binds
    # CONFIG too, so that a bad value is reported once, here, not once per target.
    set(module "${CMAKE_CURRENT_BINARY_DIR}/loom/${name}/${name}.loombc")
    file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/loom/${name}")
    add_custom_command(
      OUTPUT "${module}"
      COMMAND ${_LOOM_COMMAND} link ${sources} ${lib_files} ${config} --mode merge -o "${module}"
      DEPENDS ${sources} ${lib_depends}
      COMMENT "Linking Loom sources of ${name}"
      ${_LOOM_JOB_SERVER}
      VERBATIM)
    set(module_depends "${module}")
    set(lib_files)
  endif()

  set(outputs)
  foreach(target IN LISTS ARG_TARGETS)
    if(target MATCHES "^amdgpu:(.+)$")
      set(ext hsaco)
    elseif(target MATCHES "^spirv:(.+)$")
      set(ext spv)
    elseif(target MATCHES "^nvptx:(.+)$")
      set(ext ptx)
    else()
      message(FATAL_ERROR "loom_add_kernels(${name}): TARGETS ${target}: write amdgpu:<processor>, spirv:<env> or nvptx:<sm>")
    endif()
    string(REPLACE ":" "-" tag "${target}")
    set(stem "${dir}/${name}.${tag}")
    add_custom_command(
      OUTPUT "${stem}.${ext}" "${stem}.launch.loombc" "${stem}.manifest.json"
      COMMAND ${_LOOM_COMMAND} compile "${module}" --target "${target}" -o "${stem}.${ext}"
              "--emit-launch-config=${stem}.launch.loombc" "--manifest=${stem}.manifest.json"
              ${lib_files} ${options}
      DEPENDS ${module_depends}
      COMMENT "Compiling Loom kernels ${name} for ${target}"
      ${_LOOM_JOB_SERVER}
      VERBATIM)
    list(APPEND outputs "${stem}.${ext}" "${stem}.launch.loombc" "${stem}.manifest.json")
  endforeach()
  add_custom_target(${name} ALL DEPENDS ${outputs})
  _loom_test_sources(test_sources ${ARG_LIBRARIES})
  set_target_properties(${name} PROPERTIES LOOM_OUTPUTS "${outputs}" LOOM_SOURCES "${sources};${test_sources}")
endfunction()

# The sources behind LIBRARIES items, for `loom test --library`: a loom_add_library or
# loom_add_kernels target's sources and those of the libraries it uses, or the file itself.
function(_loom_test_sources out)
  set(result)
  foreach(lib IN LISTS ARGN)
    if(TARGET "${lib}")
      get_target_property(files "${lib}" LOOM_SOURCES)
      if(NOT files)
        message(FATAL_ERROR "LIBRARIES ${lib}: a target, but not one made by loom_add_library or loom_add_kernels")
      endif()
      list(APPEND result ${files})
    elseif(lib MATCHES "\\.loom(bc)?$")
      _loom_absolute(file "${CMAKE_CURRENT_SOURCE_DIR}" "${lib}")
      list(APPEND result "${file}")
    else()
      message(FATAL_ERROR "LIBRARIES ${lib}: neither a loom target nor a .loom/.loombc file")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES result)
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# A CTest test <name>: `loom test` runs the check cases of SOURCES, linked with the sources of
# LIBRARIES (loom_add_library or loom_add_kernels targets, or .loom/.loombc files) and bound
# with CONFIG, on DEVICE (default auto: Vulkan if usable, else the interpreter). Nothing needs
# building first: the test reads the sources, so its diagnostics point into them.
function(loom_add_test name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "DEVICE" "SOURCES;LIBRARIES;CONFIG")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "loom_add_test(${name}): unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "loom_add_test(${name}): SOURCES is required")
  endif()
  if(NOT ARG_DEVICE)
    set(ARG_DEVICE auto)
  elseif(NOT ARG_DEVICE MATCHES "^(auto|vulkan|interpreter)$")
    message(FATAL_ERROR "loom_add_test(${name}): DEVICE ${ARG_DEVICE}: write auto, vulkan or interpreter")
  endif()
  _loom_absolute(sources "${CMAKE_CURRENT_SOURCE_DIR}" ${ARG_SOURCES})
  _loom_test_sources(libraries ${ARG_LIBRARIES})
  list(REMOVE_ITEM libraries ${sources})  # a file is tested, not also linked in as a library
  list(TRANSFORM libraries PREPEND "--library=")
  _loom_config(options "loom_add_test(${name})" ${ARG_CONFIG})
  # ctest starts a test's command itself, with no shell to take a leading NAME=value word, so
  # the test gets loom's settings as its environment instead.
  add_test(NAME ${name}
           COMMAND Loom::loom test ${sources} ${libraries} ${options} "--device=${ARG_DEVICE}"
           WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}")
  if(_loom_settings)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${_loom_settings}")
  endif()
endfunction()
