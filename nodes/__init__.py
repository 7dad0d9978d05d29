"""Graph nodes (budget, reason, tools) and what they need: prompts, tools, model clients.

Nothing here imports `graph/`: a node receives its ledger, model and limits through
LangGraph's runtime context (see `nodes.context`), so it can be tested with fakes.
"""
