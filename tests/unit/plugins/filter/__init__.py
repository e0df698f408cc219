# Copyright 2026 vllm-fleet contributors
