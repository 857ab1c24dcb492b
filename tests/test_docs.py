from pathlib import Path

from imxrt.npu.support import supported_ops_markdown


def test_supported_ops_doc_is_generated_from_the_capability_table():
    doc = Path(__file__).parent.parent / "docs" / "supported_ops.md"
    assert doc.read_text() == supported_ops_markdown(), "run: python -m imxrt.npu.support > docs/supported_ops.md"
