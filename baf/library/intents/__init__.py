"""Intent classifiers that need more than the core: the LLM-based classifier."""

from baf.library.intents.llm_classifier import LLMIntentClassifier

__all__ = ["LLMIntentClassifier"]
