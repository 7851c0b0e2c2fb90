"""convert_to_float8: swap a model's nn.Linear modules for octet's Float8Linear in place (as
torchao's convert_to_float8_training does), keeping the Parameter objects, hence the state_dict
keys and an optimizer built before the swap."""
import torch

from .linear import Float8Linear


def convert_to_float8(model, recipe="tensor-current", format="hybrid", module_filter=None,
                      **linear_kwargs):
    """Replaces every nn.Linear (exactly that type) of `model` for which
    module_filter(module, fqn) is true (all when None) by Float8Linear.from_linear, and returns
    `model`. recipe/format/linear_kwargs: Float8Linear's. A model that is itself an nn.Linear is
    returned converted (a new module)."""
    def wanted(module, fqn):
        return type(module) is torch.nn.Linear and (module_filter is None or
                                                    module_filter(module, fqn))

    if wanted(model, ""):
        return Float8Linear.from_linear(model, recipe=recipe, format=format, **linear_kwargs)
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            fqn = f"{parent_name}.{name}" if parent_name else name
            if wanted(child, fqn):
                setattr(parent, name, Float8Linear.from_linear(child, recipe=recipe,
                                                               format=format, **linear_kwargs))
    return model
