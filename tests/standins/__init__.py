"""Stand-ins for what the lab cannot have: a GPU's vLLM server and the Hugging Face model hub."""
