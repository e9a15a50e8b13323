"""Pure text helpers shared by the services, the CLI and the operator: exact token counts
(`tokens`), language detection and CJK segmentation for lexical search (`language`,
`segment`). Each module imports only its own library (quicktok, rjieba), never a service."""
