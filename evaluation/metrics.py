"""Translation quality with sacreBLEU (Post 2018): corpus BLEU (Papineni et al. 2002) and chrF (Popović 2015)."""

from __future__ import annotations

import sacrebleu


def bleu_chrf(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """Corpus BLEU and chrF (both 0–100) of ``hypotheses`` against one reference each (:func:`corpus_scores`).

    Raises:
        ValueError: the two lists differ in length or are empty.
    """
    return corpus_scores(hypotheses, [[r] for r in references])


def corpus_scores(hypotheses: list[str], references: list[list[str]]) -> dict[str, float]:
    """Corpus BLEU and chrF (0–100, sacreBLEU defaults: cased, 13a) with one or more references per hypothesis.

    Raises:
        ValueError: the lists differ in length or are empty.
    """
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError("need as many hypotheses as references, and at least one")
    width = max(len(r) for r in references)
    # sacreBLEU wants reference *streams* of equal length; '' marks a missing reference (a variable number).
    streams = [[r[i] if i < len(r) else "" for r in references] for i in range(width)]
    bleu = sacrebleu.corpus_bleu(hypotheses, streams)
    chrf = sacrebleu.corpus_chrf(hypotheses, streams)
    return {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2)}
