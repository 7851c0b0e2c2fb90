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
    returned converted (a new module). A Linear registered in several places (weight tying of a
    whole module, a Sequential(l, l)) becomes one Float8Linear in all of them, so they stay one
    module; the filter sees its first name (named_modules' order). Nothing is swapped until every
    replacement is made: a filter or a Float8Linear that raises leaves `model` as it was."""
    def wanted(module, fqn):
        return type(module) is torch.nn.Linear and (module_filter is None or
                                                    module_filter(module, fqn))

    if wanted(model, ""):
        return Float8Linear.from_linear(model, recipe=recipe, format=format, **linear_kwargs)
    swapped = {}  # id(nn.Linear) -> its Float8Linear, or None where the filter said no
    places = []   # (parent, name, replacement), applied once all are made
    for parent_name, parent in list(model.named_modules(remove_duplicate=False)):
        for name, child in list(parent._modules.items()):  # every name, shared children too
            if type(child) is not torch.nn.Linear:
                continue
            if id(child) not in swapped:
                fqn = f"{parent_name}.{name}" if parent_name else name
                swapped[id(child)] = (Float8Linear.from_linear(child, recipe=recipe, format=format,
                                                               **linear_kwargs)
                                      if wanted(child, fqn) else None)
            if swapped[id(child)] is not None:
                places.append((parent, name, swapped[id(child)]))
    for parent, name, replacement in places:
        setattr(parent, name, replacement)
    return model
