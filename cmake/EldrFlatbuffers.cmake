# eldr_flatbuffers(TARGET DIR SCHEMA...): generates <DIR>/eldr/<stem>_generated.h
# for each FlatBuffers schema with flatc and adds DIR to TARGET's private
# include path (the generated code is each layer's own business).
function(eldr_flatbuffers target dir)
  set(headers)
  foreach(fbs ${ARGN})
    get_filename_component(stem ${fbs} NAME_WE)
    set(out ${dir}/eldr/${stem}_generated.h)
    add_custom_command(OUTPUT ${out}
      COMMAND ${FLATC} --cpp --scoped-enums -o ${dir}/eldr ${fbs}
      DEPENDS ${fbs} COMMENT "flatc ${stem}.fbs" VERBATIM)
    list(APPEND headers ${out})
  endforeach()
  add_custom_target(${target}_schemas DEPENDS ${headers})
  add_dependencies(${target} ${target}_schemas)
  target_sources(${target} PRIVATE ${headers})
  target_include_directories(${target} PRIVATE ${dir})
endfunction()
