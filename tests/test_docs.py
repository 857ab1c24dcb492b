from pathlib import Path

from imxrt.supported_ops import markdown


def test_supported_ops_doc_is_generated_from_the_op_tables():
    doc = Path(__file__).parent.parent / "docs" / "supported_ops.md"
    assert doc.read_text() == markdown(), "run: python -m imxrt.supported_ops > docs/supported_ops.md"
