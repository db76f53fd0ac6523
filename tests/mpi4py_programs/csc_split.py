# Calls: Comm.Split(color) (key defaults to 0, so ranks keep their order),
# Get_rank on the new communicator.
#
# Origin: CSC - IT Center for Science, "Python in High Performance Computing"
# course, demos/mpi-split.py, https://github.com/csc-training/hpc-python,
# MIT licence, Copyright (c) 2019 CSC - IT Center for Science Ltd. (see
# README.md here). Copied as is.
#
# simdist-run: 4

# SPDX-FileCopyrightText: 2019 CSC - IT Center for Science Ltd. <www.csc.fi>
#
# SPDX-License-Identifier: MIT

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

color = rank % 4

local_comm = comm.Split(color)
local_rank = local_comm.Get_rank()

print("Global rank: %d  Local rank: %d" % (rank, local_rank))
