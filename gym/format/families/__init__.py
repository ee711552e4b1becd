"""The chat formats of model families other than Harmony, one module each behind `gym.format.chat_format.ChatFormat`:
``qwen`` (Qwen2.5/Qwen3, Hermes ``<tool_call>``), ``llama3`` (Llama 3.x JSON calls) and ``deepseek`` (DeepSeek-V3
tool-call tokens); what they share (the prompt from the model's chat template, the check of the template at load,
the parse into the gym's messages) is `gym.format.families.family.TemplateFamily`."""
