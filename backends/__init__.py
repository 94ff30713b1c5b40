"""Language-model backends: MLX (mlx-lm), Hugging Face (torch) and a deterministic mock.

Frameworks are imported only by the submodule that needs them, so
`import backends` works with neither installed.
"""

from __future__ import annotations
