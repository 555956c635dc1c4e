"""arxivqa: reproducing alphaXiv's ArxivQA retrieval-agent training, notebook first.

Data flows one way: corpus -> index -> tools (environment) -> rollouts -> rewards -> trainer -> results.
"""

__version__ = "0.1.0"
