"""Evaluation: the paper's protocols and metrics, and loading checkpoints to run them.

- :mod:`.sliding_window`, :mod:`.masked_lm`: protocols in plain PyTorch;
- :mod:`.checkpoint`, :mod:`.char_lm`: fairseq checkpoints scored with them;
- :mod:`.qa_metrics`, :mod:`.qa_spans`, :mod:`.qa`: extractive QA (EM/F1 by each dataset's
  convention, best spans over windows);
- :mod:`.hotpotqa_metrics`: HotpotQA's answer, supporting-fact and joint EM/F1;
- :mod:`.coref_metrics`: MUC, B³, CEAF-φ4 and the CoNLL F1;
- :mod:`.rouge`, :mod:`.summarization`: ROUGE and LED's summaries.
"""
