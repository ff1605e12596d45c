# find_package(Loom <version>) support: loom's version is read from the package this folder ships in
# (loomcli/__init__.py), so it cannot drift from the loom it belongs to. Any 0.x minor is its own
# series: 0.1 accepts 0.1.y only; from 1.0 on, one major series is compatible.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../__init__.py" _loom_version_line REGEX "^__version__ = ")
string(REGEX REPLACE "^__version__ = \"([^\"]*)\".*" "\\1" PACKAGE_VERSION "${_loom_version_line}")
unset(_loom_version_line)

set(PACKAGE_VERSION_COMPATIBLE FALSE)
set(PACKAGE_VERSION_EXACT FALSE)
if(PACKAGE_FIND_VERSION)
  string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _loom_series "${PACKAGE_VERSION}")
  set(_loom_major "${CMAKE_MATCH_1}")
  set(_loom_minor "${CMAKE_MATCH_2}")
  if(PACKAGE_VERSION VERSION_GREATER_EQUAL PACKAGE_FIND_VERSION
     AND _loom_major EQUAL PACKAGE_FIND_VERSION_MAJOR
     AND (_loom_major GREATER 0 OR _loom_minor EQUAL PACKAGE_FIND_VERSION_MINOR))
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
  endif()
  if(PACKAGE_VERSION VERSION_EQUAL PACKAGE_FIND_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
  unset(_loom_series)
  unset(_loom_major)
  unset(_loom_minor)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
