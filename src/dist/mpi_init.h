// src/dist/mpi_init.h — MPI's one initialization per process (src/dist/mpi.cpp), shared by the MPI
// communicator and the job checks that run before it (job_checks.cpp).
#pragma once

namespace octet::dist_detail {

/// MPI_Init_thread (MPI_THREAD_FUNNELED) once per process unless MPI is already initialized;
/// MPI_Finalize at exit. Throws octet::Error if MPI cannot start (no mpirun).
void ensure_mpi();

}  // namespace octet::dist_detail
