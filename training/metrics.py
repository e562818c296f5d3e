"""Translation quality with sacreBLEU (Post 2018): corpus BLEU (Papineni et al. 2002) and chrF (Popović 2015)."""

from __future__ import annotations

import sacrebleu


def bleu_chrf(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """Corpus BLEU and chrF (both 0–100) of ``hypotheses`` against one reference each.

    Raises:
        ValueError: the two lists differ in length or are empty.
    """
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError("need as many hypotheses as references, and at least one")
    bleu = sacrebleu.corpus_bleu(hypotheses, [references])
    chrf = sacrebleu.corpus_chrf(hypotheses, [references])
    return {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2)}
