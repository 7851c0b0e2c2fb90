# cmake/python_deps.cmake — the C++ headers octet takes from pinned PyPI wheels that `./dev deps`
# installs into .venv (docs/dependencies.md): the cuDNN frontend (nvidia-cudnn-frontend, header-only
# graph API: site-packages/include/cudnn_frontend.h) and CUTLASS/CuTe (nvidia-cutlass:
# site-packages/cutlass_library/source/include). Found through the interpreter OCTET_PYTHON (the
# venv's python), or given directly as OCTET_CUDNN_FRONTEND_INCLUDE / OCTET_CUTLASS_INCLUDE.
# Defines, for a CUDA build:
#   octet_cudnn   INTERFACE target: the frontend's include directory and cuDNN 9's headers (beside
#                 the CUDA toolkit, or CUDNN_ROOT); required (src/cuda/attention/cudnn/cudnn_sdpa.cpp). cuDNN itself
#                 is loaded at run time (the frontend's dynamic loading), so nothing is linked but libdl.
#   octet_cutlass INTERFACE target: CUTLASS/CuTe include directories (only when found).
if(DEFINED OCTET_PYTHON AND NOT OCTET_PYTHON_SITE)
  execute_process(COMMAND ${OCTET_PYTHON} -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  OUTPUT_VARIABLE OCTET_PYTHON_SITE OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _octet_py_rc)
  if(NOT _octet_py_rc EQUAL 0)
    message(FATAL_ERROR "OCTET_PYTHON=${OCTET_PYTHON} could not report its site-packages directory")
  endif()
  set(OCTET_PYTHON_SITE ${OCTET_PYTHON_SITE} CACHE PATH "site-packages of OCTET_PYTHON")
endif()

find_path(OCTET_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h
          HINTS ${OCTET_PYTHON_SITE}/include NO_DEFAULT_PATH)
find_path(OCTET_CUTLASS_INCLUDE cutlass/cutlass.h
          HINTS ${OCTET_PYTHON_SITE}/cutlass_library/source/include NO_DEFAULT_PATH)

if(OCTET_CUDA)
  if(NOT OCTET_CUDNN_FRONTEND_INCLUDE)
    message(FATAL_ERROR "cuDNN frontend headers not found: run ./dev deps (it installs the pinned "
            "nvidia-cudnn-frontend wheel into .venv) and configure with -DOCTET_PYTHON=$PWD/.venv/bin/python, "
            "or pass -DOCTET_CUDNN_FRONTEND_INCLUDE=<dir holding cudnn_frontend.h>")
  endif()
  find_path(OCTET_CUDNN_INCLUDE cudnn.h HINTS $ENV{CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  if(NOT OCTET_CUDNN_INCLUDE)
    message(FATAL_ERROR "cuDNN 9 headers (cudnn.h) not found beside the CUDA toolkit; set CUDNN_ROOT")
  endif()
  add_library(octet_cudnn INTERFACE)
  # SYSTEM: the frontend's own warnings are not octet's.
  target_include_directories(octet_cudnn SYSTEM INTERFACE ${OCTET_CUDNN_FRONTEND_INCLUDE} ${OCTET_CUDNN_INCLUDE})
  target_link_libraries(octet_cudnn INTERFACE ${CMAKE_DL_LIBS})
  if(OCTET_CUTLASS_INCLUDE)
    add_library(octet_cutlass INTERFACE)
    target_include_directories(octet_cutlass SYSTEM INTERFACE ${OCTET_CUTLASS_INCLUDE})
  endif()
endif()
