"""agent-fault-bench glue for mini-swe-agent: an environment class, nothing else.

mini-swe-agent runs unmodified (its own `mini` command, its DefaultAgent, its litellm model class
pointed at OPENAI_BASE_URL). Only the environment class is ours, as any deployment of the agent
supplies one: `afb_msa.environment.AfbSandboxEnvironment`.
"""
