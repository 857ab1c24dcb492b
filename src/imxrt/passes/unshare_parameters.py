"""UnshareParametersPass: every use of a module parameter gets its own ``get_attr`` node.

    %w = get_attr[fc.weight]                      %w   = get_attr[fc.weight]
    %a = linear(%x, %w, %b)                 →     %a   = linear(%x, %w, %b)
    %c = linear(%y, %w, %b)                       %w_1 = get_attr[fc.weight]
                                                  %c   = linear(%y, %w_1, %b_1)

pt2e observes (and convert folds) a constant once per node, so a layer applied twice would share one
int32 bias quantized at the first use's ``s_in * s_w`` and every other use would read it at the wrong
scale. With a node per use, each bias is quantized at its own use's scale. The nodes still name the same
parameter, so QAT trains one tensor, as the user's model does.
"""

from __future__ import annotations

from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import finish


class UnshareParametersPass(PassBase):
    """Ensures: every ``get_attr`` node has at most one user node."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "get_attr" or len(node.users) < 2:
                continue
            for user in list(node.users)[1:]:
                with gm.graph.inserting_before(user):
                    copy = gm.graph.get_attr(node.target)
                copy.meta = dict(node.meta)
                user.replace_input_with(node, copy)
                modified = True
        return PassResult(finish(gm) if modified else gm, modified)
