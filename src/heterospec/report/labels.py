"""What the figures call systems and methods, and the colour each method keeps in every figure."""

SYSTEMS = {"gpu3": "3× RTX 3090", "hetero_u280": "U280 + 2× 3090", "hetero_v80": "V80 + 2× 3090",
           "cpu3": "CPU (this machine)", "edge_jetson": "Jetson + 2× 3090"}
METHOD_LABELS = {"draft_only": "draft only", "target_only": "target only", "target_sd": "target + token spec.",
           "rsd": "RSD", "brsd": "BRSD",
           # collect variants (collect.variants): the same algorithm with another draft or speculative target writes
           "rsd_sd": "RSD + token spec.", "brsd_sd": "BRSD + token spec.", "rsd_w8a8": "RSD, int8 draft",
           "brsd_w8a8": "BRSD, int8 draft", "rsd_u280": "RSD, U280 kernel draft", "brsd_u280": "BRSD, U280 kernel draft",
           "brsd_v80": "BRSD, V80 kernel draft"}

METHOD_COLORS = {"draft only": "tab:gray", "target only": "tab:purple", "target + token spec.": "plum",
                 "RSD": "tab:blue", "BRSD": "tab:orange",
                 "BRSD + opt.": "tab:green", "RSD + token spec.": "lightsteelblue", "BRSD + token spec.": "navajowhite",
                 "RSD, int8 draft": "steelblue", "BRSD, int8 draft": "peru", "RSD, U280 kernel draft": "cadetblue",
                 "BRSD, U280 kernel draft": "sandybrown", "BRSD, V80 kernel draft": "burlywood"}
