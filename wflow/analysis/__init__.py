"""Analysis of results, without plotting: loading a source, late-window averages, the head-count
fit (``results``) and the labelled confidence intervals every study and figure quotes
(``intervals``). Below the figures and the studies; imports storage lazily, nothing above it."""
