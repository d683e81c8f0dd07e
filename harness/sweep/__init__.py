"""The sweep side: models x tasks x methods x ratios on real prompts, results, summary, plots, report."""
