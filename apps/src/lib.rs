//! DSM application programs (matmul, sor, lu...): they arrive with the runtime.
