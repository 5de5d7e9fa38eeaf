"""Stand-in Hugging Face model hub (HF_ENDPOINT protocol) serving one generated repository."""
